// API errors: always {"error": {"code", "message"}} with a stable code and its HTTP status
// (both in catalogue.ts).

import { API_ERRORS, type ApiErrorCode } from '../catalogue.js';

export class ApiError extends Error {
  constructor(
    readonly code: ApiErrorCode,
    message: string,
  ) {
    super(message);
  }

  get status(): number {
    return API_ERRORS[this.code].status;
  }
}

/** The body of an error answer, for the handlers that reply without throwing an ApiError. */
export function errorBody(code: ApiErrorCode, message: string): { error: { code: ApiErrorCode; message: string } } {
  return { error: { code, message } };
}

/** The 404 for a sandbox id nobody registered (ids are shortened: they come from the URL). */
export function noSandbox(id: string): ApiError {
  return new ApiError('NOT_FOUND', `no sandbox "${id.slice(0, 140)}"`);
}

/** The codes of fastify's own 4xx refusals (schema validation, bodyLimit, parsers), by status. */
const BY_STATUS = new Map<number, ApiErrorCode>([
  [404, 'NOT_FOUND'],
  [405, 'METHOD_NOT_ALLOWED'],
  [413, 'PAYLOAD_TOO_LARGE'],
  [415, 'UNSUPPORTED_MEDIA_TYPE'],
]);

/** The code for a framework error of this status; any other 4xx is a BAD_REQUEST. */
export function errorCodeFor(status: number): ApiErrorCode {
  return BY_STATUS.get(status) ?? 'BAD_REQUEST';
}
