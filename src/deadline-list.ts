// Calls waiting for a deadline (a gRPC call's grpc-timeout, a store call's budget), in deadline
// order, behind one timer per list instead of one per call. Callers (Envoy) send the same timeout on
// every call, so a new deadline almost always goes last: insertion scans from the tail. The timer
// is armed for the earliest deadline and, when that call has already answered, simply re-armed for
// the new head when it fires.

const MAX_TIMER_MS = 2_147_483_647;

export interface Expiring {
  deadlineAt: number;
  prev: Expiring | undefined;
  next: Expiring | undefined;
  listed: boolean;
  expire(): void;
}

export class DeadlineList {
  private head: Expiring | undefined;
  private tail: Expiring | undefined;
  private timer: NodeJS.Timeout | undefined;
  private armedAt = Infinity;
  private readonly fire = () => this.expireDue();

  add(item: Expiring): void {
    let after = this.tail;
    while (after !== undefined && after.deadlineAt > item.deadlineAt) after = after.prev;
    item.prev = after;
    item.next = after === undefined ? this.head : after.next;
    if (item.next === undefined) this.tail = item;
    else item.next.prev = item;
    if (after === undefined) this.head = item;
    else after.next = item;
    item.listed = true;
    if (item.deadlineAt < this.armedAt) this.arm(item.deadlineAt);
  }

  remove(item: Expiring): void {
    if (!item.listed) return;
    item.listed = false;
    if (item.prev === undefined) this.head = item.next;
    else item.prev.next = item.next;
    if (item.next === undefined) this.tail = item.prev;
    else item.next.prev = item.prev;
    item.prev = item.next = undefined;
  }

  close(): void {
    clearTimeout(this.timer);
    this.armedAt = Infinity;
  }

  private arm(at: number): void {
    clearTimeout(this.timer);
    this.armedAt = at;
    // setTimeout takes at most 2^31 - 1 ms (longer fires after 1 ms): a later deadline (a
    // grpc-timeout may say 99,999,999 hours) is looked at again after that long.
    this.timer = setTimeout(this.fire, Math.min(MAX_TIMER_MS, Math.max(0, at - Date.now())));
    this.timer.unref();
  }

  private expireDue(): void {
    this.armedAt = Infinity;
    const now = Date.now();
    for (let item = this.head; item !== undefined && item.deadlineAt <= now; item = this.head) {
      this.remove(item);
      item.expire();
    }
    if (this.head !== undefined) this.arm(this.head.deadlineAt);
  }
}
