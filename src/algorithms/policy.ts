import type { LimitMode } from '../model';

// The all-or-nothing rule, in one place (the Redis scripts mirror it): a request is admitted
// unless an enforced limit says no, or it carries quota-mode limits and every one of them says no
// (envoyproxy/ratelimit's quota semantics). Shadow-mode limits are reported, never block.
export function admits(modes: readonly LimitMode[], allowed: readonly boolean[]): boolean {
  let quotaTotal = 0;
  let quotaDenied = 0;
  for (let i = 0; i < modes.length; i++) {
    if (modes[i] === 'enforce' && !allowed[i]) return false;
    if (modes[i] === 'quota') {
      quotaTotal++;
      if (!allowed[i]) quotaDenied++;
    }
  }
  return quotaTotal === 0 || quotaDenied < quotaTotal;
}
