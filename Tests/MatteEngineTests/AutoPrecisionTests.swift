import Foundation
import Testing
@testable import MatteEngine
import TestPaths

/// precision=auto: bf16 only where every condition holds (a CPU measured to compute bf16 faster than
/// fp32, the bf16 set, the OpenVINO build, MatAnyone2 on this CPU), fp32 elsewhere with the reason; a
/// model-dir that is one set runs that set. CPUs
/// simulated from cpuinfo text, as in Bf16Tests; model folders made in scratch.
struct AutoPrecisionTests {
    /// A model folder with the fp32 set and, when asked, a bf16 set (manifests only: nothing loads).
    static func folder(bf16: Bool) throws -> String {
        let directory = TestPaths.scratch("auto-precision")
        for set in bf16 ? ["matanyone2", "matanyone2-bf16"] : ["matanyone2"] {
            try FileManager.default.createDirectory(atPath: directory + "/" + set, withIntermediateDirectories: true)
            try Data("{}".utf8).write(to: URL(fileURLWithPath: directory + "/" + set + "/manifest.json"))
        }
        return directory
    }

    static func options(_ cpu: CpuFeatures, modelDir: String, provider: ExecutionProvider = .cpu, runtimeLibrary: String = "",
                        server: Bool = false) -> EngineOptions {
        var options = EngineOptions(modelDir: modelDir, runtimeLibrary: runtimeLibrary)
        options.cpuFeatures = cpu
        options.session.provider = provider
        if server { options.server = ServerOptions(url: "http://127.0.0.1:1") }
        return options
    }

    static func choose(_ cpu: CpuFeatures, modelDir: String, provider: ExecutionProvider = .cpu, runtimeLibrary: String = "",
                       server: Bool = false) -> AutoPrecision.Choice {
        AutoPrecision.choose(options(cpu, modelDir: modelDir, provider: provider, runtimeLibrary: runtimeLibrary, server: server),
                             environment: [:])
    }

    /// RVM follows the same CPU rule, with no set to make (its own file runs in bf16).
    @Test func rvmRunsBf16WhereItPaysElseFp32() throws {
        let openvino = FileManager.default.fileExists(atPath: OnnxRuntime.openvinoLibraryPath)
        func choose(_ cpu: CpuFeatures, provider: ExecutionProvider = .cpu, runtimeLibrary: String = "") -> AutoPrecision.Choice {
            AutoPrecision.chooseForRVM(Self.options(cpu, modelDir: "/nonexistent", provider: provider, runtimeLibrary: runtimeLibrary),
                                       environment: [:])
        }
        for cpu in [Bf16Tests.zen4, Bf16Tests.intelAmx] {
            let choice = choose(cpu)
            #expect(choice.precision == (openvino ? .bf16 : .fp32), "\(choice.reason)")
        }
        let cases: [(AutoPrecision.Choice, String)] = [
            (choose(Bf16Tests.avx2Only), "does not compute bf16"),
            (choose(Bf16Tests.intelNoAmx), "slower than fp32"),
            (choose(Bf16Tests.cpu(vendor: "HygonGenuine", model: "Hygon C86", flags: "avx512f avx512_bf16")), "--engines rvm --bf16"),
            (choose(Bf16Tests.zen4, provider: .cuda), "execution-provider=cuda"),
            (choose(Bf16Tests.zen4, runtimeLibrary: "/some/libonnxruntime.so"), "runtime-library"),
        ]
        for (choice, says) in cases {
            #expect(choice.precision == .fp32 && choice.reason.contains(says), "\(choice.reason)")
        }
    }

    @Test func bf16OnlyWhereItPays() throws {
        let withSet = try Self.folder(bf16: true), withoutSet = try Self.folder(bf16: false)
        let openvino = FileManager.default.fileExists(atPath: OnnxRuntime.openvinoLibraryPath)
        // Zen 4 with the set: bf16 where the OpenVINO build is installed, else fp32 naming it.
        let zen4 = Self.choose(Bf16Tests.zen4, modelDir: withSet)
        #expect(zen4.precision == (openvino ? .bf16 : .fp32), "\(zen4.reason)")
        #expect(zen4.reason.contains(openvino ? "avx512_bf16" : OnnxRuntime.openvinoLibraryPath), "\(zen4.reason)")
        // Intel with AMX the kernel enables: the same (2.56x faster than fp32 there).
        let amx = Self.choose(Bf16Tests.intelAmx, modelDir: withSet)
        #expect(amx.precision == (openvino ? .bf16 : .fp32), "\(amx.reason)")
        #expect(amx.reason.contains(openvino ? "amx_bf16" : OnnxRuntime.openvinoLibraryPath), "\(amx.reason)")
        // Another vendor with AVX512_BF16: not measured, so fp32.
        let other = Self.choose(Bf16Tests.cpu(vendor: "HygonGenuine", model: "Hygon C86", flags: "avx512f avx512_bf16"), modelDir: withSet)
        #expect(other.precision == .fp32 && other.reason.contains("HygonGenuine") && other.reason.contains("precision=bf16"), "\(other.reason)")
        // A model-dir that is one set runs that set, whatever the CPU.
        for (set, precision) in [("matanyone2", ModelPrecision.fp32), ("matanyone2-int8", .int8)] {
            let named = Self.choose(Bf16Tests.zen4, modelDir: TestPaths.modelDir + "/" + set)
            #expect(named.precision == precision && named.reason.contains("model-dir is one set"), "\(named.reason)")
        }
        // Each missing condition: fp32, and the sentence says which.
        let cases: [(AutoPrecision.Choice, String)] = [
            (Self.choose(Bf16Tests.avx2Only, modelDir: withSet), "does not compute bf16"),
            (Self.choose(Bf16Tests.intelNoAmx, modelDir: withSet), "slower than fp32"),
            (Self.choose(Bf16Tests.intelAmxOldKernel, modelDir: withSet), "which this kernel does not enable"),
            (Self.choose(Bf16Tests.zen4, modelDir: withoutSet), "no bf16 set at \(withoutSet)/matanyone2-bf16"),
            (Self.choose(Bf16Tests.zen4, modelDir: withSet, provider: .cuda), "execution-provider=cuda"),
            (Self.choose(Bf16Tests.zen4, modelDir: withSet, runtimeLibrary: "/opt/ort/libonnxruntime.so"), "runtime-library"),
            (Self.choose(Bf16Tests.zen4, modelDir: withSet, server: true), "inference server"),
            (AutoPrecision.choose(Self.options(Bf16Tests.zen4, modelDir: withSet),
                                  environment: ["MATANYONE_ONNXRUNTIME": "/opt/ort/libonnxruntime.so"]), "MATANYONE_ONNXRUNTIME"),
        ]
        for (choice, why) in cases {
            #expect(choice.precision == .fp32 && choice.reason.hasPrefix("fp32: ") && choice.reason.contains(why), "\(choice.reason)")
        }
    }
}
