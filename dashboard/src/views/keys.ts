/**
 * Row navigation shared by the list views: j/k or the arrows move, Enter opens, Home/End jump.
 * Keys typed into a field are left to the field.
 */
import { useEffect, useRef, useState } from 'preact/hooks';

/** Whether a key event comes from a form field, whose keys belong to the field. */
export function isTyping(t: EventTarget | null): boolean {
  const el = t as HTMLElement | null;
  return el !== null && (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT');
}

/** The selected row index (-1: none) of a list of `count` rows. */
export function useRowKeys(count: number, onEnter: (index: number) => void): [number, (i: number) => void] {
  const [selected, setSelected] = useState(-1);
  // Keys can arrive faster than renders: the handler reads and writes the latest index here.
  const current = useRef(-1);
  const latest = useRef({ count, onEnter });
  latest.current = { count, onEnter };
  const select = (i: number) => {
    current.current = i;
    setSelected(i);
  };
  useEffect(() => {
    const on = (e: KeyboardEvent) => {
      if (e.ctrlKey || e.metaKey || e.altKey || e.defaultPrevented || isTyping(e.target)) return;
      const { count: n, onEnter: enter } = latest.current;
      const at = Math.min(current.current, n - 1);
      let next: number | undefined;
      if (e.key === 'j' || e.key === 'ArrowDown') next = Math.min(n - 1, at + 1);
      else if (e.key === 'k' || e.key === 'ArrowUp') next = Math.max(0, at - 1);
      else if (e.key === 'Home') next = 0;
      else if (e.key === 'End') next = n - 1;
      else if (e.key === 'Enter' && at >= 0) {
        e.preventDefault();
        enter(at);
        return;
      } else if (e.key === 'Escape') next = -1;
      if (next === undefined) return;
      e.preventDefault();
      select(next);
      document.querySelector(`[data-row-index="${next}"]`)?.scrollIntoView({ block: 'nearest' });
    };
    addEventListener('keydown', on);
    return () => removeEventListener('keydown', on);
  }, []);
  return [Math.min(selected, count - 1), select];
}
