// Inline styles of the elements that say how a run ran and what a timeline recorded
// (kept here, beside the code that uses them, rather than in the shared stylesheet).

export const FALLBACK_BADGE = { background: '#f6e7cf', color: '#8a5a00' };
export const WARN_BOX = { border: '1px solid #e9c98f', background: '#fff8ea', textAlign: 'left' };
export const UNRECORDED_SWATCH = {
  background: 'repeating-conic-gradient(#c9cfdb 0 25%, #e4e7ee 0 50%) 0 0 / 8px 8px', border: '1px solid #ccc',
};
