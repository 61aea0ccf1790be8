// Keys travel between open tabs of the app, never to disk beyond the tab's own
// sessionStorage: a deep link opened in a new tab asks the app's other tabs for the key
// (BroadcastChannel, same origin only) instead of landing on sign-in. Signing out in one
// tab signs out all of them.

const channel: BroadcastChannel | null = typeof BroadcastChannel === 'undefined' ? null : new BroadcastChannel('slicesched.session');

type Msg = { t: 'key?' } | { t: 'key'; key: string } | { t: 'signout' };

/** Answers other tabs' requests with `current()`, and calls `signedOut` when one signs out. */
export function serveKey(current: () => string | null, signedOut: () => void): void {
  channel?.addEventListener('message', (e: MessageEvent<Msg>) => {
    if (e.data?.t === 'key?') {
      const key = current();
      if (key) channel.postMessage({ t: 'key', key } satisfies Msg);
    } else if (e.data?.t === 'signout') {
      signedOut();
    }
  });
}

/** The key of another open tab, or null when none answers in time. */
export function askKey(timeoutMs = 250): Promise<string | null> {
  if (!channel) return Promise.resolve(null);
  return new Promise((done) => {
    const onMsg = (e: MessageEvent<Msg>) => {
      if (e.data?.t !== 'key') return;
      finish(e.data.key);
    };
    const finish = (k: string | null) => {
      clearTimeout(timer);
      channel.removeEventListener('message', onMsg);
      done(k);
    };
    const timer = setTimeout(() => finish(null), timeoutMs);
    channel.addEventListener('message', onMsg);
    channel.postMessage({ t: 'key?' } satisfies Msg);
  });
}

export function announceSignOut(): void {
  channel?.postMessage({ t: 'signout' } satisfies Msg);
}
