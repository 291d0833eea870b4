import { useState } from 'react';
import { auth } from '../api';

/** Shown once when the API answers 401; the token is kept in session storage. */
export function TokenPrompt() {
  const [value, setValue] = useState('');
  const rejected = auth.rejected();
  return (
    <div className="modal-backdrop">
      <form
        className="modal token-prompt"
        data-testid="token-prompt"
        onSubmit={(e) => {
          e.preventDefault();
          if (value.trim()) auth.setToken(value.trim());
        }}
      >
        <h2>API token needed</h2>
        <p>
          {rejected
            ? 'The collector refused the token this tab was using. Enter the right one.'
            : 'This collector requires a bearer token (collector --token).'}{' '}
          It is kept for this browser tab only (session storage).
        </p>
        <input
          type="password"
          // biome-ignore lint/a11y/noAutofocus: the prompt covers the page and this is its one field
          autoFocus
          autoComplete="off"
          placeholder="token"
          aria-label="API token"
          data-testid="token-input"
          value={value}
          onChange={(e) => setValue(e.target.value)}
        />
        <div className="modal-actions">
          <button type="submit" className="primary" data-testid="token-submit" disabled={!value.trim()}>
            Use token
          </button>
        </div>
      </form>
    </div>
  );
}
