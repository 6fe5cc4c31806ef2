/**
 * The canonical proto3 JSON mapping of `io.linkerd.proxy.inbound.Server` (POLICY-SEMANTICS §5):
 * lowerCamelCase field names, default values omitted, oneofs as their set field, `Duration` as
 * `"10s"`, 64-bit integers as strings, bytes as base64. This is what `ward diagnostics policy`
 * prints and what the controller's JSON API returns. It is the generated `toJSON` of the wire
 * message, so JSON and protobuf cannot disagree.
 */
import type { InboundServer, Meta } from '../core/index.js';
import { Server } from './gen/inbound.js';
import { Metadata } from './gen/meta.js';
import { metaToWire, serverToWire } from './inbound-wire.js';

/** A JSON value. */
export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

/** `io.linkerd.proxy.meta.Metadata`. */
export function metadataJson(meta: Meta): Json {
  return Metadata.toJSON(metaToWire(meta)) as Json;
}

/** Proto3 JSON of an `InboundServer` as the `io.linkerd.proxy.inbound.Server` message. */
export function serverToProtoJson(s: InboundServer): Json {
  return Server.toJSON(serverToWire(s)) as Json;
}
