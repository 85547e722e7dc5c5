// What CUPTI's PC Sampling API gives on this GPU, before gpu-agent builds on it
// (issue 21, part 2): a kernel with a known hot loop is timed with sampling off,
// then with continuous sampling on (period 2^PERIOD cycles, every stall reason);
// the samples are read with cuptiPCSamplingGetData and attributed to source lines
// with cuptiGetSassToSourceCorrelation (CUPTI's own answer, which a cubin parser
// must match). The module's cubin is written to CUBIN_OUT, so the line table can be
// checked off the GPU. Prints one JSON object.
//   nvcc -O3 -lineinfo -o pcs pc_sampling.cu -lcupti -lcuda && ./pcs [LAUNCHES=200] [PERIOD=10] [CUBIN_OUT]
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <cupti_pcsampling.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#define CHECK_CUPTI(x)                                                                   \
    do {                                                                                 \
        CUptiResult r_ = (x);                                                            \
        if (r_ != CUPTI_SUCCESS) {                                                       \
            const char *s_;                                                              \
            cuptiGetResultString(r_, &s_);                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);               \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

__global__ void hot_loop(float *x, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    for (int k = 0; k < iters; k++) {
        v = __sinf(v) * 1.0001f + 0.5f;  // HOT_LINE: most samples land here
    }
    x[i] = v;
}

static std::vector<char> g_cubin;

static void CUPTIAPI on_resource(void *, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
    if (domain != CUPTI_CB_DOMAIN_RESOURCE || cbid != CUPTI_CBID_RESOURCE_MODULE_LOADED) return;
    auto *rd = (const CUpti_ResourceData *)data;
    auto *md = (const CUpti_ModuleResourceData *)rd->resourceDescriptor;
    if (md && md->pCubin && md->cubinSize > g_cubin.size())
        g_cubin.assign(md->pCubin, md->pCubin + md->cubinSize);
}

static double run(float *d, int n, int iters, int launches) {
    auto t0 = std::chrono::steady_clock::now();
    for (int l = 0; l < launches; l++) hot_loop<<<(n + 255) / 256, 256>>>(d, n, iters);
    cudaDeviceSynchronize();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / launches;
}

int main(int argc, char **argv) {
    int launches = argc > 1 ? atoi(argv[1]) : 200;
    uint32_t period = argc > 2 ? atoi(argv[2]) : 10;
    const char *cubin_out = argc > 3 ? argv[3] : nullptr;
    CUpti_SubscriberHandle sub;
    CHECK_CUPTI(cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_resource, nullptr));
    CHECK_CUPTI(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED));
    const int n = 1 << 20, iters = 2000;
    float *d;
    cudaMalloc(&d, n * sizeof(float));
    cudaMemset(d, 0, n * sizeof(float));
    CUcontext ctx;
    cuCtxGetCurrent(&ctx);
    run(d, n, iters, 3);  // module loaded, clocks up
    double off_us = run(d, n, iters, launches);

    CUpti_PCSamplingEnableParams ep = {CUpti_PCSamplingEnableParamsSize};
    ep.ctx = ctx;
    CHECK_CUPTI(cuptiPCSamplingEnable(&ep));  // first: the queries below need it
    size_t nreasons = 0;
    CUpti_PCSamplingGetNumStallReasonsParams np = {CUpti_PCSamplingGetNumStallReasonsParamsSize};
    np.ctx = ctx;
    np.numStallReasons = &nreasons;
    CHECK_CUPTI(cuptiPCSamplingGetNumStallReasons(&np));
    std::vector<uint32_t> idx(nreasons);
    std::vector<char *> names(nreasons);
    for (auto &s : names) s = (char *)calloc(CUPTI_STALL_REASON_STRING_SIZE, 1);
    CUpti_PCSamplingGetStallReasonsParams rp = {CUpti_PCSamplingGetStallReasonsParamsSize};
    rp.ctx = ctx;
    rp.numStallReasons = nreasons;
    rp.stallReasonIndex = idx.data();
    rp.stallReasons = names.data();
    CHECK_CUPTI(cuptiPCSamplingGetStallReasons(&rp));
    std::map<uint32_t, std::string> reason_name;
    for (size_t i = 0; i < nreasons; i++) reason_name[idx[i]] = names[i];

    // The configured buffer is CUPTI's own; GetData fills another one.
    const size_t npcs = 10000;
    auto make_buffer = [&]() {
        CUpti_PCSamplingData b = {};
        b.size = sizeof(CUpti_PCSamplingData);
        b.collectNumPcs = npcs;
        b.pPcData = (CUpti_PCSamplingPCData *)calloc(npcs, sizeof(CUpti_PCSamplingPCData));
        for (size_t i = 0; i < npcs; i++) {
            b.pPcData[i].size = sizeof(CUpti_PCSamplingPCData);
            b.pPcData[i].stallReason = (CUpti_PCSamplingStallReason *)calloc(nreasons, sizeof(CUpti_PCSamplingStallReason));
        }
        return b;
    };
    CUpti_PCSamplingData cupti_buf = make_buffer(), buf = make_buffer();
    std::vector<CUpti_PCSamplingConfigurationInfo> cfg(6);
    cfg[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
    cfg[0].attributeData.collectionModeData.collectionMode = CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
    cfg[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
    cfg[1].attributeData.samplingPeriodData.samplingPeriod = period;
    cfg[2].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
    cfg[2].attributeData.stallReasonData.stallReasonCount = nreasons;
    cfg[2].attributeData.stallReasonData.pStallReasonIndex = idx.data();
    cfg[3].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
    cfg[3].attributeData.samplingDataBufferData.samplingDataBuffer = &cupti_buf;
    cfg[4].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_OUTPUT_DATA_FORMAT;
    cfg[4].attributeData.outputDataFormatData.outputDataFormat = CUPTI_PC_SAMPLING_OUTPUT_DATA_FORMAT_PARSED;
    cfg[5].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL;
    cfg[5].attributeData.enableStartStopControlData.enableStartStopControl = 0;
    CUpti_PCSamplingConfigurationInfoParams cp = {CUpti_PCSamplingConfigurationInfoParamsSize};
    cp.ctx = ctx;
    cp.numAttributes = cfg.size();
    cp.pPCSamplingConfigurationInfo = cfg.data();
    CHECK_CUPTI(cuptiPCSamplingSetConfigurationAttribute(&cp));
    double on_us = run(d, n, iters, launches);

    // (function, pc offset, reason) -> samples; and correlation ids seen
    std::map<std::tuple<std::string, uint64_t, uint32_t>, uint64_t> samples;
    std::map<uint32_t, uint64_t> corr;
    // CUPTI documents functionName as the client's to free(); NVIDIA's sample frees
    // each distinct pointer once: how many records share one says which a client must do.
    std::set<const void *> name_ptrs;
    uint64_t total = 0, dropped = 0, records = 0, calls = 0, crc = 0;
    auto take = [&](CUpti_PCSamplingData &b) {
        total += b.totalSamples;
        dropped += b.droppedSamples;
        for (size_t i = 0; i < b.totalNumPcs; i++) {
            auto &pc = b.pPcData[i];
            records++;
            crc = pc.cubinCrc;
            uint64_t off = pc.pcOffset;  // a packed struct: copied, not bound
            std::string fn = pc.functionName ? pc.functionName : "?";
            name_ptrs.insert(pc.functionName);
            for (size_t r = 0; r < pc.stallReasonCount; r++) {
                uint32_t reason = pc.stallReason[r].pcSamplingStallReasonIndex;
                samples[std::make_tuple(fn, off, reason)] += pc.stallReason[r].samples;
            }
            corr[pc.correlationId] += 1;
        }
    };
    // While enabled, GetData hands over what CUPTI has; Disable leaves the rest in
    // the configured buffer.
    for (int guard = 0; guard < 1000; guard++) {
        CUpti_PCSamplingGetDataParams gp = {CUpti_PCSamplingGetDataParamsSize};
        gp.ctx = ctx;
        gp.pcSamplingData = &buf;
        CHECK_CUPTI(cuptiPCSamplingGetData(&gp));
        calls++;
        take(buf);
        if (buf.remainingNumPcs == 0 && buf.totalNumPcs == 0) break;
    }
    CUpti_PCSamplingDisableParams dp = {CUpti_PCSamplingDisableParamsSize};
    dp.ctx = ctx;
    CHECK_CUPTI(cuptiPCSamplingDisable(&dp));
    take(cupti_buf);

    // per source line (CUPTI's correlation) and per stall reason
    std::map<std::string, uint64_t> by_line, by_reason;
    std::map<uint64_t, uint32_t> line_of_pc;
    uint64_t sum = 0;
    for (auto &[k, v] : samples) {
        auto &[fn, pc, reason] = k;
        sum += v;
        by_reason[reason_name[reason]] += v;
        if (!line_of_pc.count(pc) && !g_cubin.empty()) {
            CUpti_GetSassToSourceCorrelationParams sp = {CUpti_GetSassToSourceCorrelationParamsSize};
            sp.cubin = g_cubin.data();
            sp.cubinSize = g_cubin.size();
            sp.functionName = fn.c_str();
            sp.pcOffset = pc;
            line_of_pc[pc] = cuptiGetSassToSourceCorrelation(&sp) == CUPTI_SUCCESS ? sp.lineNumber : 0;
            free(sp.fileName);
            free(sp.dirName);
        }
        by_line[std::to_string(line_of_pc[pc])] += v;
    }
    if (cubin_out && !g_cubin.empty()) {
        FILE *f = fopen(cubin_out, "wb");
        fwrite(g_cubin.data(), 1, g_cubin.size(), f);
        fclose(f);
    }
    printf("{\"launches\": %d, \"period_log2_cycles\": %u, \"us_per_launch_off\": %.1f, \"us_per_launch_on\": %.1f,"
           " \"stall_reasons\": %zu, \"get_data_calls\": %llu, \"pc_records\": %llu, \"samples\": %llu,"
           " \"total_samples\": %llu, \"dropped_samples\": %llu, \"correlation_ids\": %zu, \"cubin_crc\": %llu,"
           " \"cubin_bytes\": %zu, \"hot_line\": %d, \"function_name_pointers\": %zu,\n \"samples_by_line\": {",
           launches, period, off_us, on_us, nreasons, (unsigned long long)calls, (unsigned long long)records,
           (unsigned long long)sum, (unsigned long long)total, (unsigned long long)dropped, corr.size(),
           (unsigned long long)crc, g_cubin.size(), 39, name_ptrs.size());
    const char *sep = "";
    for (auto &[l, v] : by_line) { printf("%s\"%s\": %llu", sep, l.c_str(), (unsigned long long)v); sep = ", "; }
    printf("},\n \"samples_by_reason\": {");
    sep = "";
    for (auto &[r, v] : by_reason) { if (v) { printf("%s\"%s\": %llu", sep, r.c_str(), (unsigned long long)v); sep = ", "; } }
    printf("},\n \"pc_offsets\": {");
    sep = "";
    std::map<uint64_t, uint64_t> by_pc;
    for (auto &[k, v] : samples) by_pc[std::get<1>(k)] += v;
    for (auto &[pc, v] : by_pc) { printf("%s\"0x%llx\": %llu", sep, (unsigned long long)pc, (unsigned long long)v); sep = ", "; }
    printf("}}\n");
    return 0;
}
