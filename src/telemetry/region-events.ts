import { Counter, Gauge, Histogram } from 'prom-client';
import type { Logger } from '../logger';
import type { RegionEvents } from '../store/region';
import type { Metrics } from './metrics';

// What the multi-region layer can tell at scrape time.
export interface RegionSources {
  reachable(): boolean;
  // Units the region's allowances held at their last decisions here.
  held(): number;
  // Mean units asked per lease (the last lease of each key).
  leaseSize(): number;
}

// The multi-region layer's events as metrics (labelled with the region) and log lines.
export function regionEvents(metrics: Metrics, logger: Logger, region: string): { events: RegionEvents; watch(sources: RegionSources): void } {
  const registers = [metrics.registry];
  const labels = { region };
  let sources: RegionSources | undefined;
  const calls = new Histogram({
    name: 'sluice_region_global_call_duration_seconds',
    help: 'Calls from this region to the global Redis by operation (lease, give_back, absorb, probe) and result (ok, error)',
    labelNames: ['region', 'operation', 'result'],
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers,
  });
  const units = new Counter({
    name: 'sluice_region_units_total',
    help: "Units of the global budget: leased into this region's allowances, returned unused, admitted on the region's own while cut off (overshoot), and reconciled into the global budget afterwards",
    labelNames: ['region', 'event'],
    registers,
  });
  const waits = new Counter({
    name: 'sluice_region_request_waits_total',
    help: 'Requests that waited for units from the global Redis: their key had no allowance in this region yet (a new key; a fixed window whose next window was not leased ahead), or a spent one with units on their way',
    labelNames: ['region'],
    registers,
  });
  new Gauge({
    name: 'sluice_region_global_reachable',
    help: 'The global Redis answers this region (0 = partitioned: allowances, then the partition policy)',
    labelNames: ['region'],
    registers,
    collect() {
      if (sources) this.set(labels, sources.reachable() ? 1 : 0);
    },
  });
  new Gauge({
    name: 'sluice_region_units_held',
    help: "Units this region's allowances held at their last decisions at this replica",
    labelNames: ['region'],
    registers,
    collect() {
      if (sources) this.set(labels, sources.held());
    },
  });
  new Gauge({
    name: 'sluice_region_lease_size',
    help: 'Mean units asked per lease from the global budget (the last lease of each key; sized to the region demand)',
    labelNames: ['region'],
    registers,
    collect() {
      if (sources) this.set(labels, sources.leaseSize());
    },
  });
  const events: RegionEvents = {
    globalCall(operation, result, seconds) {
      calls.observe({ region, operation, result }, seconds);
    },
    globalReachable(reachable, reason) {
      if (reachable)
        logger.info({ event: 'global_reachable', region, reason }, `region ${region}: global Redis reachable again, partition admissions reconciled`);
      else
        logger.warn(
          { event: 'global_unreachable', region, reason },
          `region ${region}: global Redis unreachable (${reason}); answering from allowances, then by the partition policy`,
        );
    },
    leased(n) {
      units.inc({ region, event: 'leased' }, n);
    },
    returned(n) {
      units.inc({ region, event: 'returned' }, n);
    },
    waited() {
      waits.inc(labels);
    },
    overshoot(n) {
      units.inc({ region, event: 'overshoot' }, n);
    },
    reconciled(n) {
      units.inc({ region, event: 'reconciled' }, n);
    },
  };
  return { events, watch: (s) => (sources = s) };
}
