import Foundation
import Testing
@testable import MatteEngine
import TestPaths

/// precision=bf16: the CPU it needs (read from /proc/cpuinfo, simulated here for CPUs this machine is
/// not), the refusals that name what to use instead, and, where this CPU computes bf16, the bf16 set
/// scripts/test.sh makes (tools/matanyone2/bf16.py) against fp32 on held-out real frames.
@Suite(.serialized) struct Bf16Tests {
    static let width = 512, height = 288

    static func cpuinfo(vendor: String, model: String, flags: String) -> String {
        "processor\t: 0\nvendor_id\t: \(vendor)\nmodel name\t: \(model)\nflags\t\t: fpu sse2 avx2 fma \(flags)\n\n"
            + "processor\t: 1\nvendor_id\t: \(vendor)\nmodel name\t: \(model)\nflags\t\t: fpu sse2 avx2 fma \(flags)\n"
    }

    static func cpu(vendor: String, model: String, flags: String) -> CpuFeatures {
        CpuFeatures(cpuinfo: cpuinfo(vendor: vendor, model: model, flags: flags))
    }

    static let avx2Only = cpu(vendor: "AuthenticAMD", model: "AMD EPYC 7B13", flags: "")
    static let zen4 = cpu(vendor: "AuthenticAMD", model: "AMD EPYC 9B14", flags: "avx512f avx512_vnni avx512_bf16")
    static let intelNoAmx = cpu(vendor: "GenuineIntel", model: "Intel(R) Xeon(R) Processor", flags: "avx512f avx512_bf16 avx512_fp16")
    static let intelAmx = cpu(vendor: "GenuineIntel", model: "Intel(R) Xeon(R) Platinum 8480+",
                              flags: "avx512f avx512_bf16 amx_bf16 amx_tile amx_int8")
    /// The same CPU under a kernel older than 5.16, which lists the amx flags but cannot run AMX.
    static let intelAmxOldKernel = CpuFeatures(cpuinfo: cpuinfo(vendor: "GenuineIntel", model: "Intel(R) Xeon(R) Platinum 8480+",
                                                                flags: "avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"),
                                               kernelEnablesAMX: false)

    @Test func cpuinfoSaysWhichBf16TheCpuComputes() {
        #expect(Self.avx2Only.bf16.isEmpty)
        #expect(Self.zen4.bf16 == ["avx512_bf16"] && Self.zen4.vendor == "AuthenticAMD" && Self.zen4.modelName == "AMD EPYC 9B14")
        #expect(Self.intelAmx.bf16 == ["amx_bf16", "avx512_bf16"])
        #expect(Self.zen4.bf16Problem == nil && Self.intelNoAmx.bf16Problem == nil && Self.intelAmx.bf16Problem == nil)
        let problem = Self.avx2Only.bf16Problem ?? ""
        #expect(problem.contains("AMD EPYC 7B13") && problem.contains("precision=fp32"), "\(problem)")
        // Where bf16 is native but measured slower than fp32: Intel's AVX512_BF16 without AMX, or with
        // AMX a kernel cannot run.
        #expect(Self.intelNoAmx.bf16SlowerThanFp32 && Self.intelAmxOldKernel.bf16SlowerThanFp32)
        #expect(!Self.intelAmx.bf16SlowerThanFp32 && !Self.zen4.bf16SlowerThanFp32)
        #expect(Self.intelAmx.amxBf16 && !Self.intelAmxOldKernel.amxBf16 && !Self.zen4.amxBf16)
        #expect(Self.intelAmxOldKernel.bf16 == ["amx_bf16", "avx512_bf16"], "the instructions are there; the kernel's state is not")
        // This machine's kernel: where the CPU lists AMX tiles, Linux 5.16 and later enable them.
        if CpuFeatures.current.flags.contains("amx_tile") {
            let release = ProcessInfo.processInfo.operatingSystemVersion
            let modern = (release.majorVersion, release.minorVersion) >= (5, 16)
            #expect(CpuFeatures.current.kernelEnablesAMX == modern, "kernel \(release), AMX enabled: \(CpuFeatures.current.kernelEnablesAMX)")
        } else {
            #expect(!CpuFeatures.current.amxBf16)
        }
        // This machine's own file parses (every Linux CPU lists flags).
        #expect(!CpuFeatures.current.flags.isEmpty)
    }

    private func open(_ cpu: CpuFeatures, modelDir: String = TestPaths.modelDir, provider: ExecutionProvider = .cpu,
                      runtimeLibrary: String = "") throws -> MatAnyone2Engine {
        var options = EngineOptions(modelDir: modelDir, runtimeLibrary: runtimeLibrary, precision: .bf16)
        options.cpuFeatures = cpu
        options.session.provider = provider
        return try MatAnyone2Engine(options: options, seed: .mask(pixels: [255], width: 1, height: 1))
    }

    @Test func aCpuWithoutBf16IsASettingsError() {
        // Said before any model is looked for: the model folder here does not exist.
        #expect {
            try open(Self.avx2Only, modelDir: "/nonexistent/models")
        } throws: { error in
            guard case let .badSettings(detail) = error as? EngineError else { return false }
            return detail.contains("AVX512_BF16") && detail.contains("AMX") && detail.contains("precision=fp32")
        }
    }

    @Test func aGpuProviderIsASettingsError() {
        #expect {
            try open(Self.zen4, modelDir: "/nonexistent/models", provider: .cuda)
        } throws: { error in
            guard case let .badSettings(detail) = error as? EngineError else { return false }
            return detail.contains("execution-provider=cuda") && detail.contains("precision=fp16")
        }
    }

    @Test func aRuntimeWithoutOpenVinoIsASettingsError() throws {
        let plain = OnnxRuntime.defaultLibraryPath
        try #require(FileManager.default.fileExists(atPath: plain), "scripts/setup.sh installs \(plain)")
        #expect {
            try open(Self.zen4, runtimeLibrary: plain)
        } throws: { error in
            guard case let .badSettings(detail) = error as? EngineError else { return false }
            return detail.contains("no OpenVINO execution provider") && detail.contains(OnnxRuntime.openvinoLibraryPath)
        }
    }

    @Test func aMissingSetSaysHowToMakeIt() throws {
        try #require(FileManager.default.fileExists(atPath: OnnxRuntime.openvinoLibraryPath),
                     "scripts/setup.sh installs the OpenVINO build on x86-64")
        let directory = TestPaths.scratch("no-bf16")
        let fp32 = ModelLocations.matAnyone2Dir(modelDir: TestPaths.modelDir, precision: .fp32)
        try FileManager.default.createSymbolicLink(atPath: directory + "/matanyone2", withDestinationPath: fp32)
        #expect {
            try open(Self.zen4, modelDir: directory)
        } throws: { error in
            guard case let .modelMissing(path, hint) = error as? EngineError else { return false }
            return path.hasSuffix("matanyone2-bf16") && hint.contains(".venv-openvino/bin/python -m tools.matanyone2.bf16")
        }
    }

    /// On this machine: where the CPU computes bf16, the set runs (its bf16 models on OpenVINO) and stays
    /// within issue #20's bounds of fp32 on frames after the first 8 (held out: int8 calibrates on
    /// those); elsewhere the element's error is what a user gets, and that is what is checked.
    @Test func bf16StaysNearFp32OnHeldOutFramesOrIsRefused() throws {
        let mask = try [UInt8](Data(contentsOf: URL(fileURLWithPath: TestPaths.dataDir + "/test-sample2-mask-512x288.gray")))
        func engine(_ precision: ModelPrecision) throws -> MatAnyone2Engine {
            try MatAnyone2Engine(options: EngineOptions(modelDir: TestPaths.modelDir, precision: precision),
                                 seed: .mask(pixels: mask, width: Self.width, height: Self.height))
        }
        guard !CpuFeatures.current.bf16.isEmpty else {
            #expect {
                try engine(.bf16)
            } throws: { error in
                guard case let .badSettings(detail) = error as? EngineError else { return false }
                return detail.contains("precision=fp32")
            }
            return
        }
        let manifest = try ModelManifest.load(directory: ModelLocations.matAnyone2Dir(modelDir: TestPaths.modelDir, precision: .bf16))
        #expect(manifest.precision == .bf16 && !manifest.bf16Models.isEmpty)
        let bf16 = try engine(.bf16)
        #expect(bf16.precision == .bf16)
        #expect(bf16.providers[manifest.bf16Models[0]] == .openvino)
        #expect(bf16.providers["memframe"] == .cpu, "memframe stays fp32 on the CPU provider")
        let frames = Array(try TestPaths.frames("test-sample2-512x288.bgra", width: Self.width, height: Self.height).prefix(14))
        let exact = try workingAlphas(try engine(.fp32), frames, width: Self.width, height: Self.height)
        let reduced = try workingAlphas(bf16, frames, width: Self.width, height: Self.height)
        var differences: [Float] = []
        for (a, b) in zip(exact.dropFirst(8), reduced.dropFirst(8)) {
            differences += zip(a, b).map { abs($0 - $1) }
        }
        let mean = differences.reduce(0, +) / Float(differences.count)
        differences.sort()
        let p99 = differences[differences.count * 99 / 100], maximum = differences.last!
        print("MatAnyone2 bf16 vs fp32 over frames 8-13: mean |Δ| \(mean), p99 \(p99), max \(maximum) "
              + "(\(CpuFeatures.current.bf16.joined(separator: "+")))")
        #expect(maximum > 1e-4, "bf16 output identical to fp32: bf16 arithmetic did not run")
        #expect(mean <= 0.01)
        #expect(p99 <= 0.05)
    }
}
