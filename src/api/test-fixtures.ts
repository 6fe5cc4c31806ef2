/**
 * Hand-built `InboundServer` values covering every protocol, route, match, filter and
 * authentication variant the wire mapping knows, for the api tests (test support only).
 */
import { type Authorization, DETECT_TIMEOUT_MS, defaultMeta, GATEWAY_GROUP, type InboundServer, type Meta, POLICY_GROUP } from '../core/index.js';

const resource = (kind: string, name: string, group = POLICY_GROUP): Meta => ({ group, kind, name });

/** Any client, from anywhere (the `all-unauthenticated` default). */
export const allUnauthenticated: Authorization = {
  meta: defaultMeta('all-unauthenticated'),
  networks: [
    { net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] },
    { net: { ip: '::', prefixLen: 0 }, except: [] },
  ],
  authentication: { kind: 'unauthenticated' },
};

/** Mesh TLS with identities and suffixes (including the match-all `[]`), IPv4/IPv6 networks with exceptions. */
export const meshIdentities: Authorization = {
  meta: resource('AuthorizationPolicy', 'web-authn'),
  networks: [
    { net: { ip: '10.0.0.0', prefixLen: 8 }, except: [{ ip: '10.1.2.3', prefixLen: 32 }] },
    {
      net: { ip: 'fd00::', prefixLen: 8 },
      except: [
        { ip: 'fd00::1', prefixLen: 128 },
        { ip: '2001:db8::', prefixLen: 32 },
      ],
    },
  ],
  authentication: {
    kind: 'tlsAuthenticated',
    identities: ['web.emojivoto.serviceaccount.identity.linkerd.cluster.local', 'vote-bot.emojivoto.serviceaccount.identity.linkerd.cluster.local'],
    suffixes: [['emojivoto', 'serviceaccount', 'identity', 'linkerd', 'cluster', 'local'], []],
  },
};

/** Mesh TLS without a required client identity. */
export const meshAnyClient: Authorization = {
  meta: resource('ServerAuthorization', 'any-meshed'),
  networks: [{ net: { ip: '192.168.0.0', prefixLen: 16 }, except: [] }],
  authentication: { kind: 'tlsUnauthenticated' },
};

/** The default policy of an unbound port: detect, one catch-all route, all clients allowed. */
export const defaultServer: InboundServer = {
  meta: defaultMeta('all-unauthenticated'),
  protocol: {
    kind: 'detect',
    timeoutMs: DETECT_TIMEOUT_MS,
    httpRoutes: [
      {
        meta: defaultMeta('default'),
        hosts: [],
        authorizations: [],
        rules: [{ matches: [{ path: { kind: 'prefix', value: '/' }, headers: [], queryParams: [] }], filters: [] }],
      },
    ],
  },
  authorizations: [allUnauthenticated],
};

/** A Server with detect, HTTP routes using every match and filter, and every authentication. */
export const richHttpServer: InboundServer = {
  meta: resource('server', 'web-http'),
  protocol: {
    kind: 'detect',
    timeoutMs: DETECT_TIMEOUT_MS,
    httpRoutes: [
      {
        meta: resource('HTTPRoute', 'web-api'),
        hosts: [
          { kind: 'exact', value: 'web.example.com' },
          { kind: 'suffix', reverseLabels: ['com', 'example'] },
        ],
        authorizations: [meshIdentities],
        rules: [
          {
            matches: [
              {
                path: { kind: 'exact', value: '/api/vote' },
                headers: [
                  { name: 'x-exact', kind: 'exact', value: 'yes ✓' },
                  { name: 'x-regex', kind: 'regex', value: 'a.*b' },
                ],
                queryParams: [
                  { name: 'q', kind: 'exact', value: '1' },
                  { name: 'r', kind: 'regex', value: '[0-9]+' },
                ],
                method: 'POST',
              },
              { path: { kind: 'regex', value: '/api/.*' }, headers: [], queryParams: [], method: 'PURGE' },
              { headers: [], queryParams: [], method: 'GET' },
            ],
            filters: [
              {
                kind: 'requestHeaderModifier',
                add: [{ name: 'x-add', value: 'a' }],
                set: [{ name: 'x-set', value: 'ß' }],
                remove: ['x-remove', 'x-other'],
              },
              { kind: 'requestRedirect', scheme: 'https', host: 'other.example.com', path: { kind: 'prefix', value: '/v2' }, port: 8443, status: 302 },
              { kind: 'requestRedirect', path: { kind: 'full', value: '/moved' } },
              { kind: 'requestRedirect', scheme: 'http' },
              { kind: 'failureInjector', status: 503, message: 'injected', ratio: { numerator: 1, denominator: 10 } },
            ],
          },
          { matches: [], filters: [{ kind: 'requestHeaderModifier', add: [], set: [], remove: ['x-only-remove'] }] },
        ],
      },
      {
        meta: resource('HTTPRoute', 'gateway-route', GATEWAY_GROUP),
        hosts: [],
        authorizations: [],
        rules: [{ matches: [{ path: { kind: 'prefix', value: '/' }, headers: [], queryParams: [] }], filters: [] }],
      },
    ],
  },
  authorizations: [meshIdentities, meshAnyClient, allUnauthenticated],
};

/** A gRPC Server with every gRPC match shape and both gRPC filters. */
export const grpcServer: InboundServer = {
  meta: resource('server', 'emoji-grpc'),
  protocol: {
    kind: 'grpc',
    routes: [
      {
        meta: resource('GRPCRoute', 'emoji', GATEWAY_GROUP),
        hosts: [{ kind: 'exact', value: 'emoji-svc' }],
        authorizations: [meshAnyClient],
        rules: [
          {
            matches: [
              { rpc: { service: 'emojivoto.v1.EmojiService', method: 'ListAll' }, headers: [] },
              { rpc: { service: 'emojivoto.v1.EmojiService' }, headers: [{ name: 'x-v', kind: 'exact', value: '1' }] },
              { rpc: {}, headers: [] },
              { headers: [{ name: 'x-r', kind: 'regex', value: '.+' }] },
            ],
            filters: [
              { kind: 'requestHeaderModifier', add: [], set: [{ name: 'x-s', value: 'v' }], remove: [] },
              { kind: 'failureInjector', status: 14, message: 'unavailable', ratio: { numerator: 1, denominator: 2 } },
            ],
          },
        ],
      },
    ],
  },
  authorizations: [meshIdentities],
};

/** One server per remaining protocol (http1/http2 with routes, opaque, tls with nothing allowed). */
export const otherProtocolServers: readonly InboundServer[] = [
  {
    meta: resource('server', 'h1'),
    protocol: { kind: 'http1', routes: richHttpServer.protocol.kind === 'detect' ? richHttpServer.protocol.httpRoutes : [] },
    authorizations: [meshAnyClient],
  },
  { meta: resource('server', 'h2'), protocol: { kind: 'http2', routes: [] }, authorizations: [allUnauthenticated] },
  { meta: defaultMeta('cluster-authenticated'), protocol: { kind: 'opaque' }, authorizations: [meshIdentities] },
  { meta: resource('server', 'tls-passthrough'), protocol: { kind: 'tls' }, authorizations: [] },
];

/** Every fixture server. */
export const allFixtureServers: readonly InboundServer[] = [defaultServer, richHttpServer, grpcServer, ...otherProtocolServers];
