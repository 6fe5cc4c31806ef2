import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { containerArgv, containerEnv, expandKubeVars, type PodEnvFacts, withoutHostProxies } from './env.js';

const lookup = (vars: Record<string, string>) => (n: string) => (Object.hasOwn(vars, n) ? vars[n] : undefined);

describe('expandKubeVars (the kubelet rules)', () => {
  const cases: [string, string][] = [
    ['$(A)', 'a'],
    ['x$(A)y$(B)z', 'xaybz'],
    ['$(MISSING)', '$(MISSING)'],
    ['$$(A)', '$(A)'],
    ['$$', '$'],
    ['$$$(A)', '$a'],
    ['$A', '$A'],
    ['cost: 5$', 'cost: 5$'],
    ['$(A', '$(A'],
    ['$()', '$()'],
    ['', ''],
    ['$(A)$(A)', 'aa'],
  ];
  for (const [input, want] of cases) {
    it(`${JSON.stringify(input)} -> ${JSON.stringify(want)}`, () => assert.equal(expandKubeVars(input, lookup({ A: 'a', B: 'b' })), want));
  }
});

const MESHED: PodEnvFacts = {
  namespace: 'demo',
  name: 'web-0',
  serviceAccount: 'web',
  podIp: '127.20.0.4',
  appHost: '127.21.0.4',
  meshed: true,
  hostIp: '127.19.0.1',
};

describe('containerEnv', () => {
  it('sets the pod facts and the proxy variables, then the container env in order with expansion', () => {
    const { env, declared, unsupported } = containerEnv(
      {
        name: 'web',
        env: [
          { name: 'PORT', value: '8080' },
          { name: 'LISTEN', value: '$(WARD_APP_HOST):$(PORT)' },
          { name: 'LATER', value: '$(AFTER)' },
          { name: 'AFTER', value: 'x' },
          { name: 'ME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
          { name: 'SECRET', valueFrom: {} },
          { name: 'NODE', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
        ],
      },
      MESHED,
      { PATH: '/usr/bin', HOME: '/home/u', HTTPS_PROXY: 'http://corp:3128', NO_PROXY: 'localhost' },
    );
    assert.deepEqual(declared, {
      POD_NAME: 'web-0',
      POD_NAMESPACE: 'demo',
      POD_IP: '127.20.0.4',
      WARD_APP_HOST: '127.21.0.4',
      HTTP_PROXY: 'http://127.20.0.4:4140',
      http_proxy: 'http://127.20.0.4:4140',
      grpc_proxy: 'http://127.20.0.4:4140',
      PORT: '8080',
      LISTEN: '127.21.0.4:8080',
      LATER: '$(AFTER)',
      AFTER: 'x',
      ME: 'web-0',
    });
    assert.deepEqual(env, { PATH: '/usr/bin', HOME: '/home/u', ...declared }, "inherited variables stay, the host's proxy settings go");
    assert.deepEqual(unsupported, [
      ['SECRET', 'valueFrom other than fieldRef'],
      ['NODE', 'fieldRef spec.nodeName'],
    ]);
  });

  it('unmeshed pods get no proxy variables and listen on the pod address', () => {
    const { env } = containerEnv({ name: 'c' }, { ...MESHED, meshed: false, appHost: '127.20.0.4' }, { HTTP_PROXY: 'http://corp:3128' });
    assert.deepEqual(env, { POD_NAME: 'web-0', POD_NAMESPACE: 'demo', POD_IP: '127.20.0.4', WARD_APP_HOST: '127.20.0.4' });
  });

  it('a container variable overrides a runtime one', () => {
    const { env } = containerEnv({ name: 'c', env: [{ name: 'HTTP_PROXY', value: '' }] }, MESHED, {});
    assert.equal(env.HTTP_PROXY, '');
    assert.equal(env.http_proxy, 'http://127.20.0.4:4140');
  });
});

describe('containerArgv', () => {
  it('is command then args, expanded against the declared variables only', () => {
    const declared = { PORT: '8080', POD_NAME: 'web-0' };
    assert.deepEqual(containerArgv({ name: 'c', command: ['node', 'server.mjs'], args: ['--port=$(PORT)', '$(HOME)', '$$(PORT)'] }, declared), [
      'node',
      'server.mjs',
      '--port=8080',
      '$(HOME)',
      '$(PORT)',
    ]);
  });

  it('is undefined without a command (args alone would run the image entrypoint)', () => {
    assert.equal(containerArgv({ name: 'c', args: ['x'] }, {}), undefined);
    assert.equal(containerArgv({ name: 'c', command: [] }, {}), undefined);
  });
});

describe('withoutHostProxies', () => {
  it("drops the host's proxy settings in both cases (the proxies' environment: grpc-js honours them) and unset variables", () => {
    const host: Record<string, string | undefined> = { PATH: '/bin', HOME: '/home/me', UNSET: undefined };
    for (const k of ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'NO_PROXY', 'GRPC_PROXY', 'NO_GRPC_PROXY']) {
      host[k] = 'http://corp:3128';
      host[k.toLowerCase()] = 'http://corp:3128';
    }
    assert.deepEqual(withoutHostProxies(host), { PATH: '/bin', HOME: '/home/me' });
  });
});
