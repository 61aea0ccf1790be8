import { ApiError } from '../api';
import { h } from '../dom';
import type { Page } from './page';

export function signinPage(notice: string, signIn: (key: string) => Promise<void>): Page {
  return (main) => {
    const input = h('input', { id: 'api-key', type: 'password', autocomplete: 'off', required: true,
      placeholder: 'sk_…', 'aria-describedby': 'key-help' });
    const msg = h('p', { class: 'form-error', role: 'alert', id: 'signin-error' }, notice);
    const button = h('button', { class: 'btn btn-primary', type: 'submit' }, 'Sign in');
    const form = h('form', { class: 'signin', onsubmit: async (e: Event) => {
      e.preventDefault();
      const key = input.value.trim();
      if (!key) return;
      button.disabled = true;
      msg.textContent = '';
      try {
        await signIn(key);
      } catch (err) {
        msg.textContent = err instanceof ApiError && err.unauthorized
          ? 'That key was not accepted (unknown, revoked or expired).'
          : err instanceof ApiError ? `${err.title}. ${err.detail}` : String(err);
      } finally {
        button.disabled = false;
      }
    } },
    h('h1', null, 'SliceScheduler'),
    h('p', { class: 'lede' }, 'Operator-level scheduling for multi-tenant LLM serving: runs, policy comparisons, SLA attainment and per-GPU timelines.'),
    h('label', { for: 'api-key' }, 'API key'),
    input,
    h('p', { id: 'key-help', class: 'hint' }, 'Admins use the token from SLICESCHED_ADMIN_TOKEN; tenants and analysts use the key an admin created for them. The key stays in this browser tab only.'),
    msg,
    button);
    main.append(h('div', { class: 'signin-wrap' }, form));
    input.focus();
  };
}
