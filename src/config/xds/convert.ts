import { ConfigError } from '../../errors';
import type { Any } from '../../gen/google/protobuf/any';
import { RateLimitConfig, type RateLimitDescriptor, type RateLimitPolicy, rateLimitUnitToJSON } from '../../gen/ratelimit/config/ratelimit/v3/rls_conf';
import { type ConfigLimits, DEFAULT_CONFIG_LIMITS, LimitError, LoadBudget, MAX_DESCRIPTOR_DEPTH } from '../limits';
import type { RawConfigFile, RawDescriptor, RawRateLimit } from '../parse';

export const RATE_LIMIT_CONFIG_TYPE = 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig';

export interface Converted {
  documents: RawConfigFile[];
  // Resources that could not be decoded or exceed a config limit; a non-empty list rejects the push.
  errors: ConfigError[];
}

// Pushed resources → the documents the YAML parser would have produced for the same config, one
// per resource (upstream turns each into a YAML root the same way: config_xds.go), so the one
// compiler validates and compiles them with the same rules and messages as files.
export function convertResources(resources: Any[], limits: ConfigLimits = DEFAULT_CONFIG_LIMITS): Converted {
  const budget = new LoadBudget(limits);
  const documents: RawConfigFile[] = [];
  const errors: ConfigError[] = [];
  resources.forEach((any, i) => {
    const where = `xds resource #${i}`;
    if (any.typeUrl !== RATE_LIMIT_CONFIG_TYPE) {
      errors.push(new ConfigError(where, `resource of type '${any.typeUrl}', expected ${RATE_LIMIT_CONFIG_TYPE}`));
      return;
    }
    let message: RateLimitConfig;
    try {
      message = RateLimitConfig.decode(any.value);
    } catch (e) {
      errors.push(new ConfigError(where, `cannot decode RateLimitConfig: ${(e as Error).message}`));
      return;
    }
    const file = `xds:${message.name || message.domain || `#${i}`}`;
    try {
      documents.push({ file, domain: message.domain, descriptors: descriptors(message.descriptors, budget, 1) });
    } catch (e) {
      // A LimitError (too many, too deep); anything else is a bug that must reject, not crash.
      const text = e instanceof LimitError ? e.message : `error converting resource: ${(e as Error)?.message ?? String(e)}`;
      errors.push(new ConfigError(file, text));
    }
  });
  return { documents, errors };
}

function descriptors(list: RateLimitDescriptor[], budget: LoadBudget, depth: number): RawDescriptor[] {
  if (list.length > 0 && depth > MAX_DESCRIPTOR_DEPTH) {
    throw new LimitError(`config limit: descriptors nested deeper than ${MAX_DESCRIPTOR_DEPTH} levels`);
  }
  return list.map((d) => {
    budget.descriptor(undefined);
    return {
      key: d.key,
      value: d.value,
      rateLimit: d.rateLimit === undefined ? undefined : rateLimit(d.rateLimit),
      descriptors: descriptors(d.descriptors, budget, depth + 1),
      shadowMode: d.shadowMode,
      quotaMode: d.quotaMode,
      detailedMetric: d.detailedMetric,
      // Not in the xDS message (upstream's neither): only YAML can set them.
      valueToMetric: false,
      shareThreshold: false,
      metadata: d.metadata,
    };
  });
}

function rateLimit(p: RateLimitPolicy): RawRateLimit {
  return {
    broken: false,
    // Upstream passes the enum's name, so an unset unit is 'UNKNOWN': refused unless unlimited.
    unit: rateLimitUnitToJSON(p.unit),
    requestsPerUnit: p.requestsPerUnit,
    // proto3 cannot tell 0 from absent; 0 is taken as written, as upstream does.
    requestsPerUnitGiven: true,
    unlimited: p.unlimited,
    name: p.name,
    replaces: p.replaces.map((r) => ({ name: r.name })),
    lines: {},
  };
}
