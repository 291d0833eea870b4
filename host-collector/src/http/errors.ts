// API errors: always {"error": {"code", "message"}} with a stable code and an HTTP status.

export const API_ERRORS = {
  BAD_REQUEST: 400,
  BAD_ID: 400,
  BAD_PATH: 400,
  UNAUTHORIZED: 401,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  PATH_IN_USE: 409,
  UNSUPPORTED_MEDIA_TYPE: 415,
  LISTEN_FAILED: 422,
  DUMP_FAILED: 422,
  STALE_GENERATION: 409,
  INTERNAL: 500,
  PROBE_UNREACHABLE: 503,
  DUMP_TIMEOUT: 504,
  /** The dump worker could not take the request (it failed, or too many were waiting). */
  ANALYSIS_FAILED: 503,
  /** The dump worker gave the request up at its time limit. */
  ANALYSIS_TIMEOUT: 504,
} as const;

export type ApiErrorCode = keyof typeof API_ERRORS;

export class ApiError extends Error {
  constructor(
    readonly code: ApiErrorCode,
    message: string,
  ) {
    super(message);
  }

  get status(): number {
    return API_ERRORS[this.code];
  }
}

/** The 404 for a sandbox id nobody registered (ids are shortened: they come from the URL). */
export function noSandbox(id: string): ApiError {
  return new ApiError('NOT_FOUND', `no sandbox "${id.slice(0, 140)}"`);
}
