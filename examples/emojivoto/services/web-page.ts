/**
 * The web service's one page: the emoji to vote for and the leaderboard, self-contained (inline
 * style and script, no external assets) and driven by the JSON API of services/web.ts.
 */

/** Allows the inline style and script and same-origin API calls, nothing else. */
export const PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'";

/** The page. */
export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>emojivoto</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 60rem; padding: 0 1rem; color: #222; }
  h1 { font-size: 1.6rem; margin-bottom: .25rem; }
  p.hint { color: #666; margin-top: 0; }
  main { display: grid; grid-template-columns: 2fr 1fr; gap: 2rem; }
  #emoji { display: grid; grid-template-columns: repeat(auto-fill, minmax(3.5rem, 1fr)); gap: .5rem; }
  #emoji button { font-size: 2rem; padding: .3rem; border: 1px solid #ddd; border-radius: .5rem; background: #fff; cursor: pointer; }
  #emoji button:hover { background: #f3f3f3; }
  #status { min-height: 1.5rem; margin: 1rem 0; }
  #status.error { color: #b00020; }
  table { border-collapse: collapse; width: 100%; }
  td { padding: .2rem .4rem; border-bottom: 1px solid #eee; }
  td.emoji { font-size: 1.5rem; }
  td.votes { text-align: right; font-variant-numeric: tabular-nums; }
</style>
</head>
<body>
<h1>emojivoto</h1>
<p class="hint">Click an emoji to vote for it.</p>
<div id="status" role="status"></div>
<main>
  <section><div id="emoji">loading…</div></section>
  <section><h2>Leaderboard</h2><table><tbody id="leaderboard"></tbody></table></section>
</main>
<script>
  const status = document.getElementById('status');
  function show(message, isError) {
    status.textContent = message;
    status.className = isError ? 'error' : '';
  }
  async function api(path) {
    const res = await fetch(path);
    const body = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error(res.status + ': ' + (body.error || res.statusText));
    return body;
  }
  async function vote(emoji) {
    try {
      await api('/api/vote?choice=' + encodeURIComponent(emoji.shortcode));
      show('Voted for ' + emoji.unicode + ' ' + emoji.shortcode, false);
      await refreshLeaderboard();
    } catch (e) {
      show('Vote failed: ' + e.message, true);
    }
  }
  async function loadEmoji() {
    const grid = document.getElementById('emoji');
    try {
      const list = await api('/api/list');
      grid.replaceChildren(...list.map((emoji) => {
        const b = document.createElement('button');
        b.textContent = emoji.unicode;
        b.title = emoji.shortcode;
        b.addEventListener('click', () => vote(emoji));
        return b;
      }));
    } catch (e) {
      grid.textContent = 'Could not load the emoji: ' + e.message;
    }
  }
  async function refreshLeaderboard() {
    const table = document.getElementById('leaderboard');
    try {
      const board = await api('/api/leaderboard');
      table.replaceChildren(...board.slice(0, 10).map((row) => {
        const tr = document.createElement('tr');
        for (const [cls, text] of [['emoji', row.unicode], ['', row.shortcode], ['votes', String(row.votes)]]) {
          const td = document.createElement('td');
          td.className = cls;
          td.textContent = text;
          tr.append(td);
        }
        return tr;
      }));
    } catch (e) {
      table.replaceChildren();
      show('Leaderboard unavailable: ' + e.message, true);
    }
  }
  loadEmoji();
  refreshLeaderboard();
  setInterval(refreshLeaderboard, 2000);
</script>
</body>
</html>
`;
