import assert from 'node:assert/strict';
import { AsyncLocalStorage, AsyncResource, executionAsyncId } from 'node:async_hooks';
import { once } from 'node:events';
import { connect, createServer } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { builtinBindHasDeprecatedAccessor, installLeanAsyncBind } from './async-bind.js';

// Nodes 20 to 24 have the accessor, so the lean bind installs; Node 26 dropped it and keeps its own.
const builtin = AsyncResource.prototype.bind;
const hadAccessor = builtinBindHasDeprecatedAccessor();
const installed = installLeanAsyncBind();
const lean = { skip: installed ? false : "this Node's bind has no deprecated accessor: the lean bind is not installed" };

describe('lean AsyncResource#bind', () => {
  it('installs only where the built-in bind has the deprecated accessor', () => {
    assert.equal(installed, hadAccessor);
    assert.equal(installed, Number(process.versions.node.split('.')[0]) < 26, 'the accessor is gone from Node 26 on');
    if (!installed) assert.equal(AsyncResource.prototype.bind, builtin);
  });

  it('installs once', lean, () => {
    const bind = AsyncResource.prototype.bind;
    assert.equal(installLeanAsyncBind(), true);
    assert.equal(AsyncResource.prototype.bind, bind);
    assert.equal(
      Object.getOwnPropertyDescriptor(
        new AsyncResource('t').bind(() => 1),
        'asyncResource',
      )?.get,
      undefined,
    );
  });

  it('runs the function in the resource scope with its this, arguments and result', lean, () => {
    const als = new AsyncLocalStorage<string>();
    // The resource's scope is where it was created.
    const r = als.run('at-create', () => new AsyncResource('t'));
    const bound = als.run('at-bind', () =>
      r.bind(function (this: unknown, a: number, b: number) {
        return { self: this, sum: a + b, id: executionAsyncId(), store: als.getStore() };
      }),
    );
    const self = { name: 'receiver' };
    const out = als.run('at-call', () => bound.call(self, 2, 3));
    assert.deepEqual(out, { self, sum: 5, id: r.asyncId(), store: 'at-create' });
    assert.equal(bound.length, 2);
    assert.equal((bound as unknown as { asyncResource: AsyncResource }).asyncResource, r);
    assert.ok(Object.keys(bound).includes('asyncResource'));
  });

  it('binds thisArg when given, and the static AsyncResource.bind goes through it', () => {
    const self = { n: 7 };
    const r = new AsyncResource('t');
    // @types/node declares bind(fn) only; node's takes a thisArg too.
    const bindWithThis = r.bind as unknown as (fn: (this: { n: number }, k: number) => number, thisArg: unknown) => (this: unknown, k: number) => number;
    const bound = bindWithThis.call(
      r,
      function (this: { n: number }, k: number) {
        return this.n * k;
      },
      self,
    );
    assert.equal(bound.call({ n: 1 }, 3), 21);
    const als = new AsyncLocalStorage<number>();
    const viaStatic = als.run(42, () => AsyncResource.bind(() => als.getStore()));
    assert.equal(viaStatic(), 42);
  });

  it('rejects a non-function exactly as the built-in does', () => {
    assert.throws(() => new AsyncResource('t').bind('nope' as unknown as () => void), { code: 'ERR_INVALID_ARG_TYPE' });
  });

  it('prints no deprecation warning when asyncResource is read or written', lean, async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error): void => {
      warnings.push(w);
    };
    process.on('warning', onWarning);
    try {
      const r = new AsyncResource('t');
      const bound = r.bind(() => undefined) as unknown as { asyncResource: unknown };
      assert.equal(bound.asyncResource, r);
      bound.asyncResource = 'replaced';
      assert.equal(bound.asyncResource, 'replaced');
      await new Promise((resolve) => setImmediate(resolve));
      assert.deepEqual(
        warnings.map((w) => w.name),
        [],
      );
    } finally {
      process.off('warning', onWarning);
    }
  });

  it("keeps node:http2's request context: a response handler sees the store of the request", async () => {
    const server = createServer((_req, res) => res.end('ok'));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const session = connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    try {
      const als = new AsyncLocalStorage<string>();
      const seen = await Promise.all(
        ['first', 'second'].map(
          (name) =>
            new Promise<string | undefined>((resolve, reject) => {
              als.run(name, () => {
                const req = session.request({ ':path': '/' });
                req.on('response', () => resolve(als.getStore()));
                req.on('error', reject);
                req.resume();
                req.end();
              });
            }),
        ),
      );
      assert.deepEqual(seen, ['first', 'second']);
    } finally {
      session.close();
      server.close();
    }
  });
});
