// What a region cut off from the global Redis does once a key's allowance is spent: deny, allow,
// or admit this share of each limit on its own (GLOBAL_PARTITION_POLICY).
export type PartitionPolicy = { kind: 'deny' } | { kind: 'allow' } | { kind: 'share'; share: number };
