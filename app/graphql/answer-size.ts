// The answer cap (MAX_RESPONSE_BYTES) counts UTF-8 bytes, on every carrier: HTTP, WebSocket and
// server-sent events all hold their serialised answers to it through this one function, and replace an
// answer over it by this one refusal.
import { AppError } from '../core/errors.ts'

/**
 * Whether a serialised answer is at most `maxBytes` bytes in UTF-8. A UTF-16 unit is 1 to 3 bytes in
 * UTF-8: a length under a third of the cap passes at once, one over the cap fails at once, and only a
 * length between the two is counted.
 */
export function withinAnswerCap (json: string, maxBytes: number): boolean {
  return json.length * 3 <= maxBytes || (json.length <= maxBytes && Buffer.byteLength(json) <= maxBytes)
}

/** The refusal that replaces an answer over the cap (the request was processed: still a 200 over HTTP). */
export function answerTooLarge (maxBytes: number): AppError {
  return new AppError('RESPONSE_TOO_LARGE', `The answer is larger than ${maxBytes} bytes: ask for fewer fields or smaller pages`,
    { maxResponseBytes: maxBytes })
}
