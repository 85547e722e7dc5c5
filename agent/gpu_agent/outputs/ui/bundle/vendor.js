// The one entry point of the UI's third-party code. esbuild bundles it with the d3
// modules it imports into one self-contained script (vendor/flamegraph.js, the
// library's CSS included), so the agent serves the UI with no network. The UI's own
// code (agent/gpu_agent/outputs/ui/static/app.js) uses only what is exported here, through
// window.GpuAgentVendor.
import flamegraph, { colorMapper } from "d3-flame-graph";
import { scaleLinear, scaleUtc } from "d3-scale";
import { select } from "d3-selection";

window.GpuAgentVendor = {
  flamegraph,
  differentialColorMapper: colorMapper.differentialColorMapper,
  select,
  // the range chart's axes: GPU time ticks, and UTC time ticks with d3's multi-scale format
  scaleLinear,
  scaleUtc,
};
