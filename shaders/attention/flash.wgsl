// Contract (webmp/wgsl.py): no bindings; after common.wgsl; overrides T, H, DH, BC, SCALE; defines
// WG, DMAX, BCMAX, the tiles tile_x, tile_y, tile_l, tile_d and the index helpers; the kernel file
// (flash_fwd, flash_bwd_dot, flash_bwd_dkv, flash_bwd_dq) defines its bindings and entry point.
// Fused causal self-attention (flash-style; webmp/ops/flash.py): for batch-head z = b * H + h, the
// queries, keys and values are head h's columns of qkv [B*T, 3D] ([q | k | v], D = H * DH, rows
// b * T + t), as the three-kernel form reads them; O and dO are [B*T, D]. No [T, T] matrix exists:
// a workgroup of WG threads owns WG consecutive query rows (flash_fwd, flash_bwd_dq) or key rows
// (flash_bwd_dkv), a thread one row, and streams tiles of BC rows of the other side through
// workgroup memory (f32, converted once on load). Causal masking: a workgroup stops at the tile
// holding its last query (forward, dq) or starts at the tile holding its first key (dk, dv), so
// the tiles wholly above the diagonal are never loaded; inside a tile a row skips its masked keys.
// Rows are held as DH4 = ceil(DH / 4) vec4<f32> (a head size of 4n + 2 ends in two zeros). Scores
// are s = sum over quads of dot(q quad, k quad), quads in order, the same expression in every
// kernel (so the backward pass recomputes the forward's s), exp arguments are (s - m) * SCALE with m <= max s: no
// argument is positive. Math and accumulation are f32; stores go through h_pack with the overflow
// flag, as the three-kernel form's.
override T: u32;      // positions a window
override H: u32;      // heads
override DH: u32;     // head size d: even, at most DMAX
override BC: u32;     // rows a tile (tile_x, tile_y), at most BCMAX
override SCALE: f32;  // 1 / sqrt(d) as f32: the softmax's scale
override DH4: u32 = (DH + 3u) / 4u;  // quads a row

const WG: u32 = 64u;      // threads a workgroup, a row each
const DMAX4: u32 = 32u;   // the rows' private vectors: 128 values (webmp.ops.flash.FLASH_MAX_HEAD)
const BCMAX: u32 = 64u;

var<workgroup> tile_x: array<vec4<f32>, BC * DH4>;  // k (forward, dq) or q (dk, dv): row r at r * DH4
var<workgroup> tile_y: array<vec4<f32>, BC * DH4>;  // v (forward, dq) or dO (dk, dv)
var<workgroup> tile_l: array<f32, BCMAX>;    // the tile's queries' lse (dk, dv)
var<workgroup> tile_d: array<f32, BCMAX>;    // their rowsum(dO * O) (dk, dv)

// Word of value c (even) of head h, third `part` (0 q, 1 k, 2 v) of row b * T + t of qkv / dqkv.
fn qkv_word(b: u32, t: u32, part: u32, h: u32, c: u32) -> u32 {
  return ((b * T + t) * 3u * H * DH + part * H * DH + h * DH + c) / 2u;
}
// Word of value c (even) of head h in row b * T + t of O / dO.
fn o_word(b: u32, t: u32, h: u32, c: u32) -> u32 { return ((b * T + t) * H * DH + h * DH + c) / 2u; }
// Tile row r's quad c4 as loaded: tile_x / tile_y at r * DH4 + c4.
fn tile_at(r: u32, c4: u32) -> u32 { return r * DH4 + c4; }
// Whether quad c4's second word (values 4 c4 + 2, 4 c4 + 3) belongs to the head (else zeros).
fn has_hi(c4: u32) -> bool { return 4u * c4 + 2u < DH; }
