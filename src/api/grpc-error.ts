/**
 * gRPC status codes by name, so that callers outside `api` branch on `'NOT_FOUND'` and never
 * import grpc-js; the numeric codes (the wire values of `grpc-status`) and the gRPC spec's
 * mapping of HTTP statuses to codes.
 */
import { MeshError } from '../shared/index.js';

/** The gRPC status code names (the `code` of a `GrpcError`), indexed by their numeric code. */
const STATUS_NAMES = [
  'OK',
  'CANCELLED',
  'UNKNOWN',
  'INVALID_ARGUMENT',
  'DEADLINE_EXCEEDED',
  'NOT_FOUND',
  'ALREADY_EXISTS',
  'PERMISSION_DENIED',
  'RESOURCE_EXHAUSTED',
  'FAILED_PRECONDITION',
  'ABORTED',
  'OUT_OF_RANGE',
  'UNIMPLEMENTED',
  'INTERNAL',
  'UNAVAILABLE',
  'DATA_LOSS',
  'UNAUTHENTICATED',
] as const;

/** The gRPC status code names (the `code` of a `GrpcError`). */
export type GrpcStatusName = (typeof STATUS_NAMES)[number];

const STATUS_CODES = new Map<string, number>(STATUS_NAMES.map((name, code) => [name, code]));

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
  return STATUS_NAMES[code] ?? 'UNKNOWN';
}

/** The numeric status code of a name (what `grpc-status` carries). */
export function statusCode(name: GrpcStatusName): number {
  return STATUS_CODES.get(name) ?? 2;
}

/**
 * The status of a response whose HTTP status is not 200 and that carries no `grpc-status`
 * (gRPC's "HTTP to gRPC status code mapping": a proxy or a non-gRPC server answered).
 */
export function statusOfHttp(httpStatus: number): GrpcStatusName {
  switch (httpStatus) {
    case 400:
      return 'INTERNAL';
    case 401:
      return 'UNAUTHENTICATED';
    case 403:
      return 'PERMISSION_DENIED';
    case 404:
      return 'UNIMPLEMENTED';
    case 429:
    case 502:
    case 503:
    case 504:
      return 'UNAVAILABLE';
    default:
      return 'UNKNOWN';
  }
}
