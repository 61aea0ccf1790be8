import type { Route } from '../router';

export interface PageCtx {
  route: Route;
  /** Registers cleanup (timers, window listeners) for when the user leaves the page. */
  onLeave: (f: () => void) => void;
}

/** A page renders itself into `main`; errors it throws become an error state. */
export type Page = (main: HTMLElement, ctx: PageCtx) => void | Promise<void>;
