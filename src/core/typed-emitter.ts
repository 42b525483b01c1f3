import { EventEmitter } from 'node:events';

/** EventEmitter with event names and payloads checked by the compiler. */
export class TypedEmitter<Events extends { [K in keyof Events]: unknown }> {
  private readonly emitter = new EventEmitter();

  constructor() {
    // Many groups per process each add listeners; the default of 10 would warn for no reason.
    this.emitter.setMaxListeners(1000);
  }

  on<K extends keyof Events & string>(event: K, listener: (payload: Events[K]) => void): this {
    this.emitter.on(event, listener);
    return this;
  }

  once<K extends keyof Events & string>(event: K, listener: (payload: Events[K]) => void): this {
    this.emitter.once(event, listener);
    return this;
  }

  off<K extends keyof Events & string>(event: K, listener: (payload: Events[K]) => void): this {
    this.emitter.off(event, listener);
    return this;
  }

  protected emit<K extends keyof Events & string>(event: K, payload: Events[K]): void {
    this.emitter.emit(event, payload);
  }
}
