// What one HTTP/2 connection may cost the server, whatever its peer sends (DESIGN.md: every byte
// from the network is hostile). Each number bounds one way a peer can make us work or hold memory
// without asking for an answer; past it the connection gets GOAWAY ENHANCE_YOUR_CALM and is
// closed, the way nghttp2 (node:http2) and grpc-go treat floods. A client such as Envoy never comes
// near any of them: it resets a call when its timeout fires, and opens, answers and windows
// streams as the protocol expects.
export interface AbuseLimits {
  // Frames that cost us work and ask for nothing we answer: resets of calls in flight (Rapid
  // Reset), frames that make us reset a stream (MadeYouReset), streams refused, empty DATA and
  // CONTINUATION frames, PING and SETTINGS frames. A token bucket: `burst` at once, refilled at
  // `perSecond` (nghttp2 allows 1000 resets, then 33 a second).
  burst: number;
  perSecond: number;
  // A call reset this long or more after its HEADERS were read is not counted: a client giving
  // up on an answer that is slow to come (Envoy's RLS timeout is 20 ms by default) is not Rapid
  // Reset, whose resets come at once, and a reset that late frees nothing the peer could not
  // hold anyway within the streams it may have open.
  lateResetMs: number;
  // CONTINUATION frames in one header block (a block is at most MAX_HEADER_BLOCK_BYTES; a client
  // splits it at its frame size, 16 KiB or more).
  continuations: number;
  // PING ACKs, SETTINGS ACKs and RST_STREAMs written while the socket still holds unsent bytes
  // (the peer does not read), counted until it drains (nghttp2's max_outbound_ack).
  queuedControlFrames: number;
  // Unsent bytes at which we stop reading from the peer until they drain, and at which the
  // connection is closed (answers of calls already in flight can still add to them).
  pauseReadingBytes: number;
  maxQueuedBytes: number;
  // WINDOW_UPDATE frames beyond `windowUpdates` + 2 per stream + `windowUpdatesPerData` per DATA
  // frame we sent (Envoy's rule: a peer only needs to open windows for what we send). PRIORITY
  // frames beyond `priorities` per stream opened (Envoy's max_inbound_priority_frames_per_stream).
  windowUpdates: number;
  windowUpdatesPerData: number;
  priorities: number;
  // After the GOAWAY, how long calls in flight have to finish before the socket is destroyed.
  graceMs: number;
}

export const DEFAULT_LIMITS: AbuseLimits = {
  burst: 1000,
  perSecond: 100,
  lateResetMs: 10,
  continuations: 128,
  queuedControlFrames: 1000,
  pauseReadingBytes: 256 * 1024,
  maxQueuedBytes: 4 * 1024 * 1024,
  windowUpdates: 100,
  windowUpdatesPerData: 10,
  priorities: 100,
  graceMs: 500,
};

// The token bucket of AbuseLimits.burst / perSecond. Time is only read when a token is spent.
export class Budget {
  private tokens: number;
  private at = 0;

  constructor(
    private readonly burst: number,
    private readonly perSecond: number,
  ) {
    this.tokens = burst;
  }

  // false: the budget is spent.
  spend(): boolean {
    const now = performance.now();
    if (this.at !== 0) this.tokens = Math.min(this.burst, this.tokens + ((now - this.at) * this.perSecond) / 1000);
    this.at = now;
    this.tokens -= 1;
    return this.tokens >= 0;
  }
}
