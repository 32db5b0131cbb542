import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { MatchedLimit, RateLimitRule } from '../../../src/config/types';
import { StatKeyMap, statKeyOf } from '../../../src/telemetry/rule-stats';

function matched(rule: Pick<RateLimitRule, 'fullKey'>, statParts?: string[]): MatchedLimit {
  const m: MatchedLimit = { rule: rule as RateLimitRule, statKey: rule.fullKey, counterEntries: [], fromOverride: false };
  if (statParts !== undefined) m.statParts = statParts;
  return m;
}

// statKeyOf runs for every limited descriptor of every request: a rule's own key is made once, not
// once per call; keys that hold request values are the match's own.
test("a rule's own stats key is one object per rule; request-valued keys follow the match", () => {
  const rule = { fullKey: 'edge.route_api' };
  const first = statKeyOf(matched(rule));
  assert.deepEqual(first, { own: true, parts: ['edge.route_api'] });
  assert.equal(statKeyOf(matched(rule)), first);
  const other = statKeyOf(matched({ fullKey: 'edge.route_api' }));
  assert.notEqual(other, first);
  assert.deepEqual(other, first);

  const detailed = statKeyOf(matched(rule, ['edge', 'route_1.2.3.4']));
  assert.deepEqual(detailed, { own: false, parts: ['edge', 'route_1.2.3.4'] });

  const tallies = new StatKeyMap<number>();
  tallies.add(first, 1);
  tallies.add(detailed, 2);
  assert.equal(tallies.get(statKeyOf(matched(rule))), 1);
  assert.equal(tallies.get(statKeyOf(matched(rule, ['edge', 'route_1.2.3.4']))), 2);
  assert.equal(tallies.get(statKeyOf(matched(rule, ['edge.route_1', '2.3.4']))), undefined);
});
