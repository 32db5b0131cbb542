import type { ConfigHolder } from '../holder';
import type { ConfigLimits } from '../limits';
import type { Logger } from '../../logger';
import type { Settings } from '../../settings';
import { XdsConfigClient } from './client';
import { convertResources } from './convert';

// The xDS config source: the client for the transport, the holder's compiler for the verdict.
export function createXdsSource(o: { settings: Settings; holder: ConfigHolder; limits: ConfigLimits; logger: Logger }): XdsConfigClient {
  const s = o.settings;
  return new XdsConfigClient({
    serverUrl: s.xdsServerUrl,
    node: { id: s.xdsNodeId, cluster: '', metadata: pairs(s.xdsNodeMetadata, '='), userAgentName: 'sluice', clientFeatures: [] },
    headers: pairs(s.xdsAdditionalHeaders, ':'),
    tls: { tls: s.xdsTls, caCertFile: s.xdsTlsCaCert, clientCertFile: s.xdsTlsClientCert, clientKeyFile: s.xdsTlsClientKey, san: s.xdsTlsSan },
    maxMsgBytes: s.xdsMaxMsgBytes,
    backoff: { initialMs: s.xdsBackoffInitialMs, maxMs: s.xdsBackoffMaxMs, randomFactor: s.xdsBackoffRandomFactor, jitter: s.xdsBackoffJitter },
    logger: o.logger,
    apply: (response) => {
      const { documents, errors } = convertResources(response.resources, o.limits);
      return o.holder.applyDocuments(documents, { errors });
    },
  });
}

// 'k=v' (node metadata) or 'k:v' (headers) entries, split at the first separator; settings.ts
// has already refused entries without one.
function pairs(entries: readonly string[], sep: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of entries) {
    const at = e.indexOf(sep);
    out[e.slice(0, at).trim()] = e.slice(at + 1).trim();
  }
  return out;
}
