// The answer cap (MAX_RESPONSE_BYTES) counts UTF-8 bytes, on every carrier: HTTP, WebSocket and
// server-sent events all hold their serialised answers to it through this one function.

/**
 * Whether a serialised answer is at most `maxBytes` bytes in UTF-8. A UTF-16 unit is 1 to 3 bytes in
 * UTF-8: a length under a third of the cap passes at once, one over the cap fails at once, and only a
 * length between the two is counted.
 */
export function withinAnswerCap (json: string, maxBytes: number): boolean {
  return json.length * 3 <= maxBytes || (json.length <= maxBytes && Buffer.byteLength(json) <= maxBytes)
}
