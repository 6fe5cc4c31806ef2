/**
 * gRPC status codes by name, so that callers outside `api` branch on `'NOT_FOUND'` and never
 * import grpc-js.
 */
import { type ServiceError, status } from '@grpc/grpc-js';
import { MeshError } from '../shared/index.js';

/** The gRPC status code names (the `code` of a `GrpcError`). */
export type GrpcStatusName =
  | 'OK'
  | 'CANCELLED'
  | 'UNKNOWN'
  | 'INVALID_ARGUMENT'
  | 'DEADLINE_EXCEEDED'
  | 'NOT_FOUND'
  | 'ALREADY_EXISTS'
  | 'PERMISSION_DENIED'
  | 'RESOURCE_EXHAUSTED'
  | 'FAILED_PRECONDITION'
  | 'ABORTED'
  | 'OUT_OF_RANGE'
  | 'UNIMPLEMENTED'
  | 'INTERNAL'
  | 'UNAVAILABLE'
  | 'DATA_LOSS'
  | 'UNAUTHENTICATED';

/** A failed call: `code` is the gRPC status name, `details` the server's status message. */
export class GrpcError extends MeshError {
  declare readonly code: GrpcStatusName;
  readonly details: string;

  constructor(code: GrpcStatusName, details: string, options?: { cause?: unknown }) {
    super(code, details === '' ? code : `${code}: ${details}`, options);
    this.name = 'GrpcError';
    this.details = details;
  }
}

/** The name of a numeric status code (unknown numbers are `UNKNOWN`). */
export function statusName(code: number): GrpcStatusName {
  const name = (status as unknown as Record<number, string | undefined>)[code];
  return (name ?? 'UNKNOWN') as GrpcStatusName;
}

/** The numeric status code of a name. */
export function statusCode(name: GrpcStatusName): status {
  return status[name];
}

/** A `GrpcError` from a grpc-js client error (`ServiceError` or anything else thrown). */
export function grpcErrorFrom(e: unknown): GrpcError {
  if (e instanceof GrpcError) return e;
  const se = e as Partial<ServiceError> | undefined;
  if (se !== undefined && se !== null && typeof se.code === 'number') return new GrpcError(statusName(se.code), se.details ?? '', { cause: e });
  return new GrpcError('UNKNOWN', e instanceof Error ? e.message : String(e), { cause: e });
}
