import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, it } from 'node:test';
import { kubeKitAvailable, linkerdCrdNames } from './kube-kit.js';

describe('kube kit support', () => {
  const saved = { ...process.env };
  afterEach(() => {
    for (const k of ['KUBE_BIN_DIR', 'WARD_KUBE_KIT']) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
  });

  it('says why the kit cannot run: scripts or binaries missing', () => {
    const empty = mkdtempSync(join(tmpdir(), 'ward-kit-'));
    try {
      process.env.WARD_KUBE_KIT = empty;
      assert.match(kubeKitAvailable() ?? '', /kube kit not found: no .*start\.sh/);
      delete process.env.WARD_KUBE_KIT;
      process.env.KUBE_BIN_DIR = empty;
      const why = kubeKitAvailable();
      // Without the kit's scripts in this checkout, the first reason stands.
      assert.ok(why !== undefined && /kube kit (binaries missing: no .*kube-apiserver|not found)/.test(why), why);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });

  it('lists the CRDs of the kit, when the kit is there', { skip: kubeKitAvailable()?.startsWith('kube kit not found') }, () => {
    const names = linkerdCrdNames();
    assert.ok(names.includes('servers.policy.linkerd.io'), names.join());
    assert.ok(names.includes('grpcroutes.gateway.networking.k8s.io'), names.join());
  });
});
