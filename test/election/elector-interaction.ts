/**
 * Drives the pure elector machine (src/election/elector-machine.ts) from text commands and prints
 * the effects it asks for, for the datadriven scenarios in test/election/testdata.
 *
 * Commands (key=value arguments; `now` is a virtual clock in ms, starting at 0):
 *   config [ttl=1000] [margin=] [renew=] [retry=] [request=] [random=0] [progress=0] [stepdown=false]
 *                                  (first, or defaults; progress: progressTimeoutMs, stepdown: stepDownOnStall)
 *   start | stop | resign | wake | state
 *   advance MS                    fires each timer due within MS, in order, printing its effects
 *   stall MS                      moves the clock MS on without firing timers (a paused process:
 *                                 what is due then fires at the next advance)
 *   fire timer=loop|deadline|progress id=N   fires that timer now, even a stale one
 *   progress [term=N] [at=MS]     the leader work reported progress (default: the leader's term, now)
 *   acquire-ok [acquired=true] [owner=me] [term=N] [remaining=MS] [hold=MS] [id=N]   (id: the last sent; hold: a hand-over hint names another node)
 *   acquire-failed [unavailable=true] [msg=TEXT] [id=N]
 *   renew-ok [renewed=true] [owner=O|none] [term=N] [remaining=MS] [id=N]
 *   renew-failed [unavailable=true] [msg=TEXT] [id=N]
 *   release-ok term=N | release-failed term=N [msg=TEXT]
 *   push owner=O term=N [remaining=MS] | push none
 *   work-failed term=N | fenced term=N | retired term=N | fault [op=loop] [msg=TEXT]
 * Each command prints the effects (one a line) and then the state in one line.
 * TEXT is one word; `_` stands for a space.
 */
import type { Lease } from '../../src/core/index.js';
import { resolveTiming } from '../../src/core/index.js';
import { initialState, step } from '../../src/election/elector-machine.js';
import type { ElectorConfig, ElectorEffect, ElectorEvent, ElectorState, TimerName } from '../../src/election/elector-machine.js';
import { parseCommand } from '../raft/interaction.js';

const OWNER = 'me';

export class ElectorEnv {
  private config: ElectorConfig | null = null;
  private state: ElectorState = initialState();
  private now = 0;
  private readonly timers = new Map<TimerName, { id: number; at: number }>();
  private lastAcquire = 0;
  private lastRenew = 0;
  private randomValue = 0;

  run(line: string): string {
    const { name, args, kv } = parseCommand(line);
    const num = (k: string, d?: number): number => {
      const v = kv.get(k);
      if (v === undefined) {
        if (d === undefined) throw new Error(`${name}: ${k}= is required`);
        return d;
      }
      const n = Number(v);
      if (!Number.isFinite(n)) throw new Error(`${name}: ${k}=${v} is not a number`);
      return n;
    };
    const bool = (k: string, d: boolean): boolean => (kv.has(k) ? kv.get(k) === 'true' : d);
    const msg = (d: string): string => (kv.get('msg') ?? d).replace(/_/g, ' ');
    const lease = (owner: string, term: number, remaining: number): Lease => ({ name: 'g', owner, term, meta: {}, ttlMs: this.cfg().timing.ttlMs, remainingMs: remaining });
    switch (name) {
      case 'config': {
        this.randomValue = num('random', 0);
        const timing = resolveTiming({
          ttlMs: num('ttl', 1000),
          marginMs: kv.has('margin') ? num('margin') : undefined,
          renewIntervalMs: kv.has('renew') ? num('renew') : undefined,
          retryMs: kv.has('retry') ? num('retry') : undefined,
          requestTimeoutMs: kv.has('request') ? num('request') : undefined,
        });
        const progressTimeoutMs = num('progress', 0);
        const stepDownOnStall = bool('stepdown', false);
        this.config = { owner: OWNER, timing, random: { next: () => this.randomValue }, progressTimeoutMs, stepDownOnStall };
        const t = timing;
        const health = progressTimeoutMs > 0 ? ` progress=${progressTimeoutMs}${stepDownOnStall ? ' stepdown' : ''}` : '';
        return `ttl=${t.ttlMs} margin=${t.marginMs} renew=${t.renewIntervalMs} retry=${t.retryMs} request=${t.requestTimeoutMs}${health}`;
      }
      case 'start':
      case 'stop':
      case 'resign':
      case 'wake':
        return this.feed({ type: name });
      case 'state':
        return this.describe();
      case 'advance': {
        const until = this.now + Number(args[0] ?? NaN);
        if (!Number.isFinite(until)) throw new Error('advance MS');
        const out: string[] = [];
        for (;;) {
          const due = [...this.timers.entries()].filter(([, t]) => t.at <= until).sort((a, b) => a[1].at - b[1].at || a[1].id - b[1].id)[0];
          if (!due) break;
          const [timer, t] = due;
          this.timers.delete(timer);
          this.now = Math.max(this.now, t.at);
          out.push(`@${this.now} timer ${timer} #${t.id} fired`);
          out.push(...this.apply({ type: 'timer', timer, id: t.id }).map((l) => `  ${l}`));
        }
        this.now = until;
        out.push(this.describe());
        return out.join('\n');
      }
      case 'stall': {
        const by = Number(args[0] ?? NaN);
        if (!Number.isFinite(by) || by < 0) throw new Error('stall MS');
        this.now += by;
        return this.describe();
      }
      case 'fire': {
        // Fire a timer by id now, current or not (a timer cancelled too late, a replaced one).
        const named = kv.get('timer');
        const timer: TimerName = named === 'deadline' || named === 'progress' ? named : 'loop';
        const id = num('id');
        if (this.timers.get(timer)?.id === id) this.timers.delete(timer);
        return this.feed({ type: 'timer', timer, id });
      }
      case 'acquire-ok': {
        const owner = kv.get('owner') ?? OWNER;
        const hold = num('hold', 0);
        return this.feed({ type: 'acquire-ok', id: num('id', this.lastAcquire), acquired: bool('acquired', owner === OWNER), lease: lease(owner, num('term', 1), num('remaining', this.cfg().timing.ttlMs)), ...(hold > 0 ? { holdBackMs: hold } : {}) });
      }
      case 'acquire-failed':
        return this.feed({ type: 'acquire-failed', id: num('id', this.lastAcquire), unavailable: bool('unavailable', true), error: new Error(msg('no answer')) });
      case 'renew-ok': {
        const owner = kv.get('owner') ?? OWNER;
        const renewed = bool('renewed', true);
        const l = owner === 'none' ? null : lease(owner, num('term', renewed ? this.leaderTerm() : 1), num('remaining', this.cfg().timing.ttlMs));
        return this.feed({ type: 'renew-ok', id: num('id', this.lastRenew), renewed, lease: l });
      }
      case 'renew-failed':
        return this.feed({ type: 'renew-failed', id: num('id', this.lastRenew), unavailable: bool('unavailable', true), error: new Error(msg('no answer')) });
      case 'release-ok':
        return this.feed({ type: 'release-ok', term: num('term') });
      case 'release-failed':
        return this.feed({ type: 'release-failed', term: num('term'), error: new Error(msg('no answer')) });
      case 'push':
        return this.feed({ type: 'push', lease: args[0] === 'none' ? null : lease(kv.get('owner') ?? OWNER, num('term'), num('remaining', this.cfg().timing.ttlMs)) });
      case 'work-failed':
        return this.feed({ type: 'work-failed', term: num('term') });
      case 'progress':
        return this.feed({ type: 'progress', term: num('term', this.leaderTerm()), ...(kv.has('at') ? { at: num('at') } : {}) });
      case 'fenced':
        return this.feed({ type: 'fenced', term: num('term') });
      case 'retired':
        return this.feed({ type: 'retired', term: num('term') });
      case 'fault':
        return this.feed({ type: 'fault', operation: kv.get('op') ?? 'loop', error: new Error(msg('bug')) });
      default:
        throw new Error(`unknown command ${name}`);
    }
  }

  private cfg(): ElectorConfig {
    if (!this.config) this.run('config');
    return this.config!;
  }

  private leaderTerm(): number {
    return this.state.leader?.term ?? 1;
  }

  private feed(event: ElectorEvent): string {
    return [...this.apply(event), this.describe()].join('\n');
  }

  private apply(event: ElectorEvent): string[] {
    const { state, effects } = step(this.cfg(), this.state, event, this.now);
    // Frozen: a step that wrote to the state it was given (not pure) would throw here.
    this.state = deepFreeze(state);
    return effects.map((e) => this.effect(e));
  }

  private effect(e: ElectorEffect): string {
    switch (e.type) {
      case 'send-acquire':
        this.lastAcquire = e.id;
        return `send acquire #${e.id}`;
      case 'send-renew':
        this.lastRenew = e.id;
        return `send renew #${e.id} term=${e.term}`;
      case 'abandon-acquire':
        return `abandon acquire #${e.id}`;
      case 'read-hint':
        return `read hint #${e.id}`;
      case 'release':
        return `release term=${e.term}`;
      case 'set-timer':
        this.timers.set(e.timer, { id: e.id, at: this.now + e.ms });
        return `set timer ${e.timer} #${e.id} in ${e.ms}ms (at ${this.now + e.ms})`;
      case 'cancel-timer':
        this.timers.delete(e.timer);
        return `cancel timer ${e.timer}`;
      case 'lead':
        return `lead term=${e.term} deadline=${e.deadline} (in ${e.deadlineInMs}ms)`;
      case 'depose': {
        const then = [e.settle ? 'settle work' : '', e.release ? `release term=${e.term}` : '', e.after !== 'none' ? e.after : ''].filter(Boolean);
        return `depose term=${e.term} reason=${e.reason}${e.holder ? ` holder=${e.holder.owner}/${e.holder.term}` : ''}${then.length ? ` then ${then.join(', ')}` : ''}`;
      }
      case 'late':
        return `deposed term=${e.term} reason=late (not led)`;
      case 'settled':
        return 'attempt settled';
      case 'loop-ended':
        return 'loop ended';
      case 'leader-changed':
        return `leader-changed owner=${e.owner ?? 'none'} term=${e.term}`;
      case 'renewed':
        return `renewed term=${e.term} latency=${e.latencyMs}ms`;
      case 'renew-failed':
        return `renew-failed term=${e.term}: ${e.error.message}`;
      case 'store-error':
        return `store-error ${e.operation}: ${e.error.message}`;
      case 'suspended':
        return `suspended term=${e.term} until ${e.deadline}: ${e.error.message}`;
      case 'recovered':
        return `recovered term=${e.term} after ${e.suspendedMs}ms`;
      case 'stalled':
        return `stalled term=${e.term} no progress for ${e.sinceProgressMs}ms`;
      case 'unstalled':
        return `unstalled term=${e.term} after ${e.stalledMs}ms`;
    }
  }

  private describe(): string {
    const s = this.state;
    const loop = s.loop;
    const l =
      loop.kind === 'pause'
        ? `pause #${loop.timer}`
        : loop.kind === 'acquire'
          ? `acquire #${loop.id} sent@${loop.sentAt}${loop.pushed ? ' pushed' : ''}`
          : loop.kind === 'renew'
            ? `renew #${loop.id} sent@${loop.sentAt}`
            : loop.kind === 'retire'
              ? `retire term=${loop.term} backoff=${loop.backoffMs}`
              : loop.kind;
    const leader = s.leader ? `term ${s.leader.term} until ${s.leader.deadline}${s.leader.suspendedAt !== null ? ` suspended@${s.leader.suspendedAt}` : ''}${s.leader.stalled ? ' stalled' : ''}` : 'none';
    const extra = [s.stopping ? 'stopping' : '', s.retiredTerm ? `retired=${s.retiredTerm}` : '', s.resignUntil > this.now ? `resign-until=${s.resignUntil}` : '', s.faults ? `faults=${s.faults}` : ''].filter(Boolean);
    return `> @${this.now} loop=${l} leader=${leader}${extra.length ? ' ' + extra.join(' ') : ''}`;
  }
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}
