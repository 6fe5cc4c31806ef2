import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { podsToRestart } from './commands/restart.js';

const pods = [
  { namespace: 'emojivoto', name: 'web-0', owner: 'Deployment/web' },
  { namespace: 'emojivoto', name: 'web-1', owner: 'Deployment/web' },
  { namespace: 'emojivoto', name: 'emoji-0', owner: 'Deployment/emoji' },
  { namespace: 'emojivoto', name: 'db-0', owner: 'StatefulSet/db' },
  { namespace: 'emojivoto', name: 'debug', owner: null },
  { namespace: 'bad', name: 'vote-bot-0', owner: 'Deployment/vote-bot' },
];
const names = (r: { namespace: string; name: string }[]) => r.map((p) => `${p.namespace}/${p.name}`);

describe('ward restart: what the arguments name', () => {
  it('takes a pod as NS/POD, POD with -n, pod/NAME and pod/NS/NAME', () => {
    assert.deepEqual(names(podsToRestart(pods, ['emojivoto/web-0'], {})), ['emojivoto/web-0']);
    assert.deepEqual(names(podsToRestart(pods, ['debug'], { namespace: 'emojivoto' })), ['emojivoto/debug']);
    assert.deepEqual(names(podsToRestart(pods, ['pod/debug'], { namespace: 'emojivoto' })), ['emojivoto/debug']);
    assert.deepEqual(names(podsToRestart(pods, ['po/bad/vote-bot-0'], {})), ['bad/vote-bot-0']);
  });

  it('takes a workload kubectl style, its pods all restarted, and a bare kind for every workload of it', () => {
    assert.deepEqual(names(podsToRestart(pods, ['deploy/web'], { namespace: 'emojivoto' })), ['emojivoto/web-0', 'emojivoto/web-1']);
    assert.deepEqual(names(podsToRestart(pods, ['deployment/emojivoto/emoji', 'sts/db'], { namespace: 'emojivoto' })), ['emojivoto/db-0', 'emojivoto/emoji-0']);
    assert.deepEqual(names(podsToRestart(pods, ['deploy'], { namespace: 'emojivoto' })), ['emojivoto/emoji-0', 'emojivoto/web-0', 'emojivoto/web-1']);
  });

  it('takes --all for a namespace and -A for the mesh', () => {
    assert.deepEqual(names(podsToRestart(pods, [], { namespace: 'bad', all: true })), ['bad/vote-bot-0']);
    assert.equal(podsToRestart(pods, [], { allNamespaces: true }).length, pods.length);
  });

  it('leaves the old pods of a rollout out of a workload and of --all', () => {
    const rolling = [
      { namespace: 'shop', name: 'api-6555984b8d-0', owner: 'Deployment/api', replaced: true as const },
      { namespace: 'shop', name: 'api-7f87b76766-0', owner: 'Deployment/api' },
    ];
    assert.deepEqual(names(podsToRestart(rolling, ['deploy/api'], { namespace: 'shop' })), ['shop/api-7f87b76766-0']);
    assert.deepEqual(names(podsToRestart(rolling, [], { namespace: 'shop', all: true })), ['shop/api-7f87b76766-0']);
    // Named alone it is passed on: the mesh says why it cannot be restarted.
    assert.deepEqual(names(podsToRestart(rolling, ['shop/api-6555984b8d-0'], {})), ['shop/api-6555984b8d-0']);
  });

  it('says what is wrong', () => {
    assert.throws(() => podsToRestart(pods, [], {}), /name what to restart/);
    assert.throws(() => podsToRestart(pods, ['deploy/web'], {}), /deploy\/web: nothing to restart in this mesh/);
    assert.throws(() => podsToRestart(pods, ['deploy/web'], { namespace: 'emojivoto', all: true }), /not both/);
    assert.throws(() => podsToRestart(pods, ['deploy/bad/vote-bot'], { namespace: 'emojivoto' }), /in namespace bad, not emojivoto/);
    assert.throws(() => podsToRestart(pods, ['ns/emojivoto'], {}), /--all -n NAMESPACE/);
  });
});
