import Foundation

/// What `precision=auto` (the element's default) runs: bf16 where it pays, fp32 elsewhere, and why.
/// bf16 needs a CPU that computes it and measured a gain there (AMD Zen 4 and later: 1.48-1.51x over
/// fp32 with `scripts/bench.sh --precision bf16`; Intel with AMX, the kernel enabling it: 2.56x;
/// Intel's AVX512_BF16 without AMX ran 1.17-1.29x slower), the bf16 set in the model folder
/// (tools/matanyone2/bf16.py makes it) and ONNX Runtime's OpenVINO build (set-up installs it). Anything else, or MatAnyone2 elsewhere
/// (an inference server, a GPU), runs fp32. A `model-dir` that is one set runs that set.
public enum AutoPrecision {
    public struct Choice: Equatable, Sendable {
        public let precision: ModelPrecision
        /// One sentence for the log: what runs and why.
        public let reason: String
    }

    public static func choose(_ options: EngineOptions,
                              environment: [String: String] = ProcessInfo.processInfo.environment) -> Choice {
        func fp32(_ why: String) -> Choice { Choice(precision: .fp32, reason: "fp32: " + why) }
        if options.server != nil { return fp32("with an inference server, its repository decides the set") }
        let set = ModelLocations.matAnyone2Dir(modelDir: options.modelDir, precision: .bf16)
        if set == ModelLocations.matAnyone2Dir(modelDir: options.modelDir, precision: .fp32) {
            // model-dir is one set, not a folder of sets: the user named it, so it runs as it is.
            let named = (try? ModelManifest.load(directory: set))?.precision ?? .fp32
            return Choice(precision: named, reason: "\(named.rawValue): model-dir is one set (\(set)), of that precision")
        }
        if let name = ModelPlacement.modelNames.first(where: { options.placement[$0]?.onGpu == true }) {
            return fp32("model-placement puts \(name) on a GPU, which bf16 (OpenVINO on the CPU) cannot share a runtime with")
        }
        if let refusal = cpuRefusal(options, measuring: "scripts/bench.sh --precision bf16 --no-upstream") { return refusal }
        guard ModelLocations.hasMatAnyone2Set(modelDir: options.modelDir, precision: .bf16) else {
            return fp32("this CPU computes bf16 (\(options.cpuFeatures.bf16.joined(separator: ", "))), but there is no bf16 set at \(set) "
                        + "(tools/matanyone2/bf16.py makes it: README, \"Bf16\")")
        }
        if let refusal = runtimeRefusal(options, environment: environment) { return refusal }
        return Choice(precision: .bf16, reason: "bf16: this CPU computes it (\(options.cpuFeatures.bf16.joined(separator: ", "))) and the bf16 "
                      + "set is at \(set)")
    }

    /// What `precision=auto` runs for RVM: bf16 (its own file through OpenVINO) on the CPUs where bf16
    /// pays, as for MatAnyone2; measured for RVM on a Zen 4: 1.19-1.74x fp32 at mean |Δα| 0.0004-0.0005
    /// (README, "Robust Video Matting"). Elsewhere fp32, byte for byte Python ONNX Runtime's alpha.
    public static func chooseForRVM(_ options: EngineOptions,
                                    environment: [String: String] = ProcessInfo.processInfo.environment) -> Choice {
        if let refusal = cpuRefusal(options, measuring: "scripts/bench.sh --engines rvm --bf16") { return refusal }
        if let refusal = runtimeRefusal(options, environment: environment) { return refusal }
        return Choice(precision: .bf16, reason: "bf16: this CPU computes it (\(options.cpuFeatures.bf16.joined(separator: ", "))), "
                      + "RVM's file runs through OpenVINO in bf16 (precision=fp32 gives the exact alpha)")
    }

    /// fp32 with the reason when the provider or this CPU rules bf16 out (nil: they allow it).
    private static func cpuRefusal(_ options: EngineOptions, measuring: String) -> Choice? {
        func fp32(_ why: String) -> Choice { Choice(precision: .fp32, reason: "fp32: " + why) }
        guard [.cpu, .openvino].contains(options.session.provider) else {
            return fp32("execution-provider=\(options.session.provider.rawValue) is not the CPU")
        }
        let cpu = options.cpuFeatures
        if cpu.bf16.isEmpty { return fp32("this CPU does not compute bf16 (no AVX512_BF16, no AMX-BF16)") }
        if cpu.bf16SlowerThanFp32 {
            let why = cpu.flags.contains("amx_bf16") ? "its AMX, which this kernel does not enable (Linux 5.16 and later do)" : "AMX"
            return fp32("bf16 ran 1.17-1.29x slower than fp32 on Intel's AVX512_BF16 without \(why)")
        }
        guard cpu.vendor == "AuthenticAMD" || cpu.amxBf16 else {
            return fp32("bf16 is measured faster than fp32 on AMD Zen 4 and later and on Intel's AMX, not on this CPU "
                        + "(\(cpu.vendor.isEmpty ? "vendor unknown" : cpu.vendor)): \(measuring) "
                        + "measures it, precision=bf16 runs it")
        }
        return nil
    }

    /// fp32 with the reason when the runtime bf16 needs (set-up's OpenVINO build) is not the one to run.
    private static func runtimeRefusal(_ options: EngineOptions, environment: [String: String]) -> Choice? {
        func fp32(_ why: String) -> Choice { Choice(precision: .fp32, reason: "fp32: " + why) }
        guard options.runtimeLibrary.isEmpty, (environment["MATANYONE_ONNXRUNTIME"] ?? "").isEmpty else {
            return fp32("runtime-library or MATANYONE_ONNXRUNTIME names the runtime, and bf16 runs on the OpenVINO build "
                        + "set-up installs")
        }
        guard FileManager.default.fileExists(atPath: OnnxRuntime.openvinoLibraryPath) else {
            return fp32("ONNX Runtime's OpenVINO build, which bf16 runs on, is not installed at \(OnnxRuntime.openvinoLibraryPath)")
        }
        return nil
    }
}
