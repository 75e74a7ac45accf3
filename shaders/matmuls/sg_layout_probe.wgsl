// What matmul_reg_a_sg.wgsl's k_loops decides at run time, per invocation of one workgroup of
// WG_X x WG_Y: its subgroup's active lanes and whether they all share its local_invocation_id.y
// (the rows of C the register core gives a thread). webmp.engine.subgroups reads it once per device
// and workgroup shape before a plan's SG_LAYOUT = 1 kernels get pipelines. Needs `subgroups`.
@group(0) @binding(0) var<storage, read_write> out: array<u32>;  // [WG_X * WG_Y, 2]

override WG_X: u32 = 8u;
override WG_Y: u32 = 4u;

@compute @workgroup_size(WG_X, WG_Y)
fn sg_layout_probe(@builtin(local_invocation_index) i: u32, @builtin(local_invocation_id) lid: vec3<u32>) {
  let lanes = subgroupAdd(1u);
  let same_row = lid.y == subgroupBroadcastFirst(lid.y);
  out[2u * i] = lanes;
  out[2u * i + 1u] = select(0u, 1u, same_row);
}
