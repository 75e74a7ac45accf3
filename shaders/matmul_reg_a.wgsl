// Contract (webmp/wgsl.py): after matmul_reg.wgsl; defines a_setup and a_words. No bindings.
// Each thread loads all the words of op(A) it needs.

fn a_setup(row0: u32) {}

fn a_words(row0: u32, k: u32) -> array<vec2<f32>, TM_MAX> {
  var w: array<vec2<f32>, TM_MAX>;
  w[0] = a_word(row0, k, 0u);
  w[1] = a_word(row0, k, 1u);
  w[2] = a_word(row0, k, 2u);
  w[3] = a_word(row0, k, 3u);
  if (TM > 4u) {
    w[4] = a_word(row0, k, 4u);
    w[5] = a_word(row0, k, 5u);
    w[6] = a_word(row0, k, 6u);
    w[7] = a_word(row0, k, 7u);
  }
  return w;
}
