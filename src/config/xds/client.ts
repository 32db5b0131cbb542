import * as grpc from '@grpc/grpc-js';
import type { ConfigError } from '../../errors';
import { AggregatedDiscoveryServiceClient, type DiscoveryRequest, type DiscoveryResponse } from '../../gen/envoy/service/discovery/v3/discovery';
import type { Node } from '../../gen/envoy/config/core/v3/node';
import type { Logger } from '../../logger';
import { type BackoffOptions, backoffDelay } from './backoff';
import { RATE_LIMIT_CONFIG_TYPE } from './convert';
import { type XdsTlsOptions, xdsChannelOptions, xdsCredentials } from './credentials';

// What the client does with a push: the compiler's verdict (no errors = ACK).
export type ApplyPush = (response: DiscoveryResponse) => { ok: boolean; errors: readonly ConfigError[] };

export interface XdsClientOptions {
  serverUrl: string;
  node: Node;
  // gRPC metadata on every stream (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
  headers: Record<string, string>;
  tls: XdsTlsOptions;
  maxMsgBytes: number;
  backoff: BackoffOptions;
  apply: ApplyPush;
  logger: Logger;
}

// google.rpc.Code INVALID_ARGUMENT: the pushed config is what is wrong.
const INVALID_ARGUMENT = 3;
// Keeps a NACK's error_detail well under any message size limit.
const MAX_DETAIL_CHARS = 16_384;

// An ADS state-of-the-world client subscribed to every RateLimitConfig. It knows the transport and
// its retries only: what a push means is `apply`'s verdict, passed back as ACK or NACK. A lost
// stream changes nothing served; the client reconnects with backoff and resubscribes with the
// version it last ACKed.
export class XdsConfigClient {
  private client?: AggregatedDiscoveryServiceClient;
  private call?: grpc.ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>;
  private timer?: NodeJS.Timeout;
  private attempt = 0;
  private stopped = false;
  private ackedVersion = '';
  // Each stream's events are ignored once a newer stream (or stop) has replaced it.
  private generation = 0;

  constructor(private readonly o: XdsClientOptions) {}

  get lastAckedVersion(): string {
    return this.ackedVersion;
  }

  start(): void {
    this.stopped = false;
    this.connect();
  }

  stop(): void {
    this.stopped = true;
    this.generation++;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.call?.cancel();
    this.client?.close();
    this.call = undefined;
    this.client = undefined;
  }

  private connect(): void {
    const { logger, serverUrl } = this.o;
    const gen = ++this.generation;
    this.client?.close();
    let call: grpc.ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>;
    // Unreadable certificate files or an unparsable URL: reported and retried, never a crash.
    try {
      this.client = new AggregatedDiscoveryServiceClient(
        serverUrl,
        xdsCredentials(this.o.tls),
        xdsChannelOptions({ ...this.o.tls, maxMsgBytes: this.o.maxMsgBytes }),
      );
      const metadata = new grpc.Metadata();
      for (const [k, v] of Object.entries(this.o.headers)) metadata.set(k, v);
      // Not waitForReady: an unreachable control plane fails the stream at once, so reconnects
      // follow XDS_CLIENT_BACKOFF_* rather than the channel's own backoff.
      call = this.client.streamAggregatedResources(metadata);
    } catch (e) {
      logger.error({ event: 'xds_error', server: serverUrl, error: (e as Error).message }, `xDS: ${(e as Error).message}`);
      return this.retry(gen);
    }
    this.call = call;
    logger.info(
      { event: 'xds_connecting', server: serverUrl, node: this.o.node.id, version: this.ackedVersion },
      `xDS: subscribing to RateLimitConfig at ${serverUrl}`,
    );
    call.on('data', (response: DiscoveryResponse) => gen === this.generation && this.onResponse(response));
    call.on('error', (err: grpc.ServiceError) => gen === this.generation && this.onLost(gen, `${grpc.status[err.code] ?? err.code}: ${err.details}`));
    call.on('end', () => gen === this.generation && this.onLost(gen, 'stream closed by the control plane'));
    // The initial request of a stream carries the node; an empty resource list subscribes to all.
    this.send({ versionInfo: this.ackedVersion, node: this.o.node, resourceNames: [], typeUrl: RATE_LIMIT_CONFIG_TYPE, responseNonce: '' });
  }

  private send(request: DiscoveryRequest): void {
    this.call?.write(request);
  }

  private onResponse(response: DiscoveryResponse): void {
    const { logger } = this.o;
    // The stream works: the next loss starts the backoff from the initial interval again.
    this.attempt = 0;
    if (response.typeUrl !== RATE_LIMIT_CONFIG_TYPE) {
      this.nack(response, [`unexpected type_url '${response.typeUrl}': subscribed to ${RATE_LIMIT_CONFIG_TYPE} only`]);
      return;
    }
    const verdict = this.o.apply(response);
    if (verdict.ok) {
      this.ackedVersion = response.versionInfo;
      logger.info(
        { event: 'xds_ack', version: response.versionInfo, nonce: response.nonce, resources: response.resources.length },
        `xDS: config version ${response.versionInfo} applied (ACK)`,
      );
      this.send({ versionInfo: response.versionInfo, resourceNames: [], typeUrl: RATE_LIMIT_CONFIG_TYPE, responseNonce: response.nonce });
      return;
    }
    this.nack(
      response,
      verdict.errors.map((e) => e.message),
    );
  }

  // The version stays the last good one: the control plane learns what is still served.
  private nack(response: DiscoveryResponse, errors: string[]): void {
    const message = errors.join('\n').slice(0, MAX_DETAIL_CHARS);
    this.o.logger.warn(
      { event: 'xds_nack', version: response.versionInfo, nonce: response.nonce, kept: this.ackedVersion, errors: errors.length },
      `xDS: config version ${response.versionInfo} rejected (NACK), still serving version '${this.ackedVersion}'`,
    );
    this.send({
      versionInfo: this.ackedVersion,
      resourceNames: [],
      typeUrl: RATE_LIMIT_CONFIG_TYPE,
      responseNonce: response.nonce,
      errorDetail: { code: INVALID_ARGUMENT, message, details: [] },
    });
  }

  private onLost(gen: number, why: string): void {
    this.o.logger.warn(
      { event: 'xds_stream_lost', server: this.o.serverUrl, reason: why, version: this.ackedVersion },
      `xDS: stream to ${this.o.serverUrl} lost (${why}); ${this.ackedVersion === '' ? 'no config received yet' : `still serving version ${this.ackedVersion}`}`,
    );
    this.call = undefined;
    this.retry(gen);
  }

  private retry(gen: number): void {
    if (this.stopped || gen !== this.generation) return;
    this.generation++;
    const delay = backoffDelay(this.o.backoff, this.attempt++);
    this.o.logger.info({ event: 'xds_reconnect', inMs: delay, attempt: this.attempt }, `xDS: reconnecting in ${delay} ms`);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (!this.stopped) this.connect();
    }, delay);
    this.timer.unref?.();
  }
}
