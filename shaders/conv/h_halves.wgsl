// Shared by im2col, maxpool_fwd and repack_h (before the entry file): single values of h words
// moved as bits, never converted (f16 subnormals and -0 kept). No bindings, no overrides.
// A word's first or second value as the low half of a word (h_low_halves then pairs two of them).
fn h_half(w: HWLoad, second: bool) -> HWLoad { return select(w, h_high_halves(w, w), second); }
