/**
 * The values the controller synthesizes (default servers and their authorizations, the default
 * HTTP and gRPC routes, the probe route), encoded as linkerd2's policy controller encodes them for
 * the same input (policy-controller/k8s/index defaults.rs and inbound/index.rs, grpc/inbound.rs):
 * the expected messages below are transcribed from those structures, and the encoded bytes must
 * be the same.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  ALL_NETWORKS,
  DEFAULT_GRPC_ROUTE,
  DEFAULT_HTTP_ROUTE,
  DEFAULT_POLICY_NAMES,
  DETECT_TIMEOUT_MS,
  defaultMeta,
  defaultPolicyAuthz,
  type InboundServer,
  type Network,
  POLICY_GROUP,
  probeRoute,
} from '../core/index.js';
import { Server } from './gen/inbound.js';
import { serverToWire } from './inbound-wire.js';
import { serverToProtoJson } from './proto-json.js';

const CLUSTER: readonly Network[] = [
  { net: { ip: '10.0.0.0', prefixLen: 8 }, except: [] },
  { net: { ip: 'fd00::', prefixLen: 8 }, except: [] },
];

/** The proto JSON of `json` and of ward's message agree, and so do their encodings. */
function assertSameMessage(server: InboundServer, json: unknown): void {
  assert.deepStrictEqual(serverToProtoJson(server), json);
  assert.deepStrictEqual(Buffer.from(Server.encode(serverToWire(server)).finish()), Buffer.from(Server.encode(Server.fromJSON(json)).finish()));
}

const defaultLabels = (name: string) => ({ group: '', kind: 'default', name });

describe('synthesized inbound values, as upstream sends them', () => {
  it('a gRPC Server without GRPCRoutes: one default route whose match has an empty rpc (any service, any method)', () => {
    assertSameMessage(
      { meta: { group: POLICY_GROUP, kind: 'server', name: 'grpc' }, protocol: { kind: 'grpc', routes: [DEFAULT_GRPC_ROUTE] }, authorizations: [] },
      {
        protocol: { grpc: { routes: [{ metadata: { default: 'default' }, rules: [{ matches: [{ rpc: {} }] }] }] } },
        labels: { group: POLICY_GROUP, kind: 'server', name: 'grpc' },
      },
    );
  });

  it('the default HTTP route and the probe route of a pod with probes on /live and /ready', () => {
    const server: InboundServer = {
      meta: defaultMeta('deny'),
      protocol: { kind: 'detect', timeoutMs: DETECT_TIMEOUT_MS, httpRoutes: [DEFAULT_HTTP_ROUTE, probeRoute(['/live', '/ready'], ALL_NETWORKS)] },
      authorizations: [],
    };
    const get = { registered: 'GET' };
    assertSameMessage(server, {
      protocol: {
        detect: {
          timeout: '10s',
          httpRoutes: [
            { metadata: { default: 'default' }, rules: [{ matches: [{ path: { prefix: '/' } }] }] },
            {
              metadata: { default: 'probe' },
              authorizations: [
                {
                  networks: [{ net: { ip: { ipv4: 0 } } }, { net: { ip: { ipv6: {} } } }],
                  authentication: { unauthenticated: {} },
                  labels: defaultLabels('probe'),
                  metadata: { default: 'probe' },
                },
              ],
              rules: [
                {
                  matches: [
                    { path: { exact: '/live' }, method: get },
                    { path: { exact: '/ready' }, method: get },
                  ],
                },
              ],
            },
          ],
        },
      },
      labels: defaultLabels('deny'),
    });
  });

  for (const name of DEFAULT_POLICY_NAMES) {
    it(`the default server ${name}: its authorization's networks, authentication and names`, () => {
      const authz = defaultPolicyAuthz(name, CLUSTER);
      const server: InboundServer = { meta: defaultMeta(name), protocol: { kind: 'opaque' }, authorizations: authz === undefined ? [] : [authz] };
      const all = [{ net: { ip: { ipv4: 0 } } }, { net: { ip: { ipv6: {} } } }];
      const cluster = [{ net: { ip: { ipv4: 0x0a000000 }, prefixLen: 8 } }, { net: { ip: { ipv6: { first: '18230571291595767808' } }, prefixLen: 8 } }];
      // upstream: authenticated = TlsAuthenticated([Suffix([])]); cluster = the cluster networks.
      const authentication = name.endsWith('-authenticated') ? { meshTLS: { identities: { suffixes: [{}] } } } : { unauthenticated: {} };
      const networks = name.startsWith('cluster-') ? cluster : all;
      assertSameMessage(server, {
        protocol: { opaque: {} },
        ...(name === 'deny' ? {} : { authorizations: [{ networks, authentication, labels: defaultLabels(name), metadata: { default: name } }] }),
        labels: defaultLabels(name),
      });
    });
  }
});
