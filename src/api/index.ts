/**
 * Public surface of `api`: core <-> wire mapping (and, with the controller issue, the gRPC
 * servers and clients).
 */

export * from './inbound-lookup.js';
export * from './proto-json.js';
