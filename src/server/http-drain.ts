import type http from 'node:http';
import net from 'node:net';

// A graceful stop of an HTTP/1.1 listener. HTTP/1.1 has no GOAWAY: a keep-alive connection closed
// while idle races the client's next request, which may already be on the wire (a POST is not
// retried). Node's server.close() closes every idle connection at once, and under load each busy
// client lost the request it sent right after its previous answer. Instead: every answer from now
// on says `Connection: close` (the client opens a new connection, which is refused, before
// sending), the listener stops accepting, and connections still idle are closed only once the
// server has had no request for QUIET_MS — a client idle that long is not mid-send. 200 ms was
// not enough on a loaded 2-core machine (a client's event loop stalled past it and its next POST
// met the close); a second costs a stop with idle keep-alive clients one second more.
const QUIET_MS = 1000;
const POLL_MS = 20;

export class HttpDrainState {
  private draining = false;
  private readonly open = new Set<http.ServerResponse>();
  private quietSince = Date.now();
  // The listening server and any server it hands connections to (the plaintext twin of HTTPS).
  servers: http.Server[] = [];

  // Each request, from the handler.
  request(res: http.ServerResponse): void {
    this.quietSince = Date.now();
    if (this.draining) res.shouldKeepAlive = false;
    this.open.add(res);
    res.once('close', () => {
      this.open.delete(res);
      this.quietSince = Date.now();
    });
  }

  drain(timeoutMs: number): Promise<void> {
    this.draining = true;
    for (const res of this.open) if (!res.headersSent) res.shouldKeepAlive = false;
    const [listener] = this.servers;
    return new Promise((resolve) => {
      const poll = setInterval(() => {
        if (this.open.size > 0 || Date.now() - this.quietSince < QUIET_MS) return;
        // Timers run before sockets are read: after a busy event loop, a request may be waiting
        // unread. setImmediate runs after the next read of every socket; still quiet then, it is.
        const since = this.quietSince;
        setImmediate(() => {
          if (this.open.size === 0 && this.quietSince === since) for (const s of this.servers) s.closeIdleConnections();
        });
      }, POLL_MS);
      const timer = setTimeout(() => this.servers.forEach((s) => s.closeAllConnections()), timeoutMs);
      // net's close, not http's: http.Server.close() would first close every idle connection.
      net.Server.prototype.close.call(listener, () => {
        clearInterval(poll);
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

const STATES = new WeakMap<net.Server, HttpDrainState>();

export function registerDrain(server: http.Server, state: HttpDrainState, twins: http.Server[] = []): void {
  state.servers = [server, ...twins];
  STATES.set(server, state);
}

// Stops accepting and resolves once every connection has closed (at most timeoutMs, then the rest
// is closed): every request received is answered.
export function drainHttp(server: http.Server, timeoutMs: number): Promise<void> {
  const state = STATES.get(server);
  if (state !== undefined) return state.drain(timeoutMs);
  return new Promise((resolve) => (server.close(() => resolve()), server.closeIdleConnections()));
}
