/**
 * Every policy the emojivoto example publishes survives the wire: core -> Server message ->
 * bytes -> Server message -> core is the identity, and so is the trip through the canonical JSON.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { inboundProto, serverFromWire, serverToProtoJson, serverToWire } from '../../src/api/index.js';
import { clusterConfig } from '../../src/cli/cluster-config.js';
import { buildWorkspace } from '../../src/cli/workspace.js';

const DIR = new URL('../../examples/emojivoto/', import.meta.url).pathname;

describe('emojivoto policies on the wire', () => {
  const ws = buildWorkspace({ paths: [`${DIR}app`, `${DIR}policy`] }, clusterConfig({}));
  const cells = ws.index.pods().flatMap((p) =>
    [...ws.index.ports(p.namespace, p.name), 4191].flatMap((port) => {
      const cell = ws.index.lookup(p.namespace, p.name, port);
      return cell === undefined ? [] : [{ name: `${p.namespace}/${p.name}:${port}`, value: cell.value }];
    }),
  );

  it('finds the example servers', () => {
    assert.ok(cells.length >= 10, `only ${cells.length} ports`);
    assert.ok(cells.some((c) => c.value.meta.kind === 'server') && cells.some((c) => c.value.meta.kind === 'default'));
  });

  it('round-trips core -> wire -> bytes -> wire -> core', () => {
    for (const { name, value } of cells) {
      const bytes = inboundProto.Server.encode(serverToWire(value)).finish();
      const back = serverFromWire(inboundProto.Server.decode(bytes));
      assert.ok(back.ok, `${name}: ${back.ok ? '' : back.message}`);
      assert.deepStrictEqual(back.value, value, name);
    }
  });

  it('round-trips through the canonical JSON (what the CLI and the admin API print)', () => {
    for (const { name, value } of cells) {
      const back = serverFromWire(inboundProto.Server.fromJSON(JSON.parse(JSON.stringify(serverToProtoJson(value)))));
      assert.ok(back.ok, `${name}: ${back.ok ? '' : back.message}`);
      assert.deepStrictEqual(back.value, value, name);
    }
  });
});
