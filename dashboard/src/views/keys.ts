/**
 * Row navigation shared by the list views: j/k or the arrows move, Enter opens, Home/End jump.
 * Keys typed into a field are left to the field.
 */
import { useEffect, useState } from 'preact/hooks';

function isTyping(t: EventTarget | null): boolean {
  const el = t as HTMLElement | null;
  return el !== null && (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT');
}

/** The selected row index (-1: none) of a list of `count` rows. */
export function useRowKeys(count: number, onEnter: (index: number) => void): [number, (i: number) => void] {
  const [selected, setSelected] = useState(-1);
  useEffect(() => {
    const on = (e: KeyboardEvent) => {
      if (e.ctrlKey || e.metaKey || e.altKey || isTyping(e.target)) return;
      let next: number | undefined;
      if (e.key === 'j' || e.key === 'ArrowDown') next = Math.min(count - 1, selected + 1);
      else if (e.key === 'k' || e.key === 'ArrowUp') next = Math.max(0, selected - 1);
      else if (e.key === 'Home') next = 0;
      else if (e.key === 'End') next = count - 1;
      else if (e.key === 'Enter' && selected >= 0 && selected < count) {
        e.preventDefault();
        onEnter(selected);
        return;
      } else if (e.key === 'Escape') next = -1;
      if (next === undefined) return;
      e.preventDefault();
      setSelected(next);
      document.querySelector(`[data-row-index="${next}"]`)?.scrollIntoView({ block: 'nearest' });
    };
    addEventListener('keydown', on);
    return () => removeEventListener('keydown', on);
  }, [count, selected, onEnter]);
  useEffect(() => {
    if (selected >= count) setSelected(count - 1);
  }, [count, selected]);
  return [selected, setSelected];
}
