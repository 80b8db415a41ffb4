import Foundation
import Testing
@testable import MatteEngine
import TestPaths

/// The GPU path as far as a machine without a GPU can check it: the GPU build of ONNX Runtime loads
/// and lists its providers, each reason a GPU provider cannot run gives its documented message, the
/// NVIDIA libraries are loaded in dependency order, and the memory read as an ONNX graph (what runs
/// on the GPU) matches the Swift one on the CPU provider.
@Suite(.serialized) struct GpuPathTests {
    /// The GPU build scripts/test.sh installs with only two of the NVIDIA wheels (cudart, curand).
    static var gpuRuntime: String { TestPaths.dataDir + "/../test-gpu-runtime/libonnxruntime.so.1" }

    // MARK: The memory read as a graph

    /// A bank of `frames` random frames (keys, shrinkage like the encoder's: > 1, values) and a query.
    private func randomBank(keyDim: Int, valueDim: Int, tokens: Int, maxFrames: Int, frames: Int,
                            seed: UInt64) throws -> (MemoryBank, [Float], [Float]) {
        var generator = SplitMix(seed: seed)
        let bank = try MemoryBank(keyDim: keyDim, valueDim: valueDim, tokensPerFrame: tokens, maxFrames: maxFrames)
        for _ in 0..<frames {
            let key = (0..<keyDim * tokens).map { _ in generator.normal() }
            let shrinkage = (0..<tokens).map { _ in 1 + generator.unit() * 3 }
            let value = (0..<valueDim * tokens).map { _ in generator.normal() }
            bank.add(key: key, shrinkage: shrinkage, value: value)
        }
        let query = (0..<keyDim * tokens).map { _ in generator.normal() }
        let selection = (0..<keyDim * tokens).map { _ in generator.unit() }
        return (bank, query, selection)
    }

    @Test(arguments: [(64, 256, 18 * 32, 5, 1, 30), (64, 256, 18 * 32, 5, 3, 30), (64, 256, 18 * 32, 5, 7, 30),
                      (64, 256, 4, 2, 1, 30), (16, 8, 50, 3, 3, 1)])
    func graphReadoutMatchesTheSwiftRead(case: (Int, Int, Int, Int, Int, Int)) throws {
        let (keyDim, valueDim, tokens, maxFrames, frames, topK) = `case`
        let (bank, query, selection) = try randomBank(keyDim: keyDim, valueDim: valueDim, tokens: tokens,
                                                      maxFrames: maxFrames, frames: frames, seed: UInt64(tokens * 31 + frames))
        var swift = [Float](repeating: .nan, count: valueDim * tokens)
        var graph = [Float](repeating: .nan, count: valueDim * tokens)
        var queryCopy = query, selectionCopy = selection
        bank.read(queryKey: query, selection: selection, topK: topK, into: &swift)
        let reader = try MemoryReadoutGraph(runtime: try OnnxRuntime.shared(), keyDim: keyDim, valueDim: valueDim,
                                            config: SessionConfig(provider: .cpu))
        try queryCopy.withUnsafeMutableBufferPointer { q in
            try selectionCopy.withUnsafeMutableBufferPointer { s in
                try graph.withUnsafeMutableBufferPointer { out in
                    try reader.read(bank: bank, queryKey: q.baseAddress!, selection: s.baseAddress!, topK: topK, into: out.baseAddress!)
                }
            }
        }
        let worst = zip(swift, graph).map { abs($0 - $1) }.max() ?? .infinity
        print("memory readout graph vs Swift (CK \(keyDim), CV \(valueDim), HW \(tokens), \(bank.frames) frames, top-\(topK)): max |Δ| \(worst)")
        #expect(!graph.contains { $0.isNaN })
        #expect(worst <= 1e-5)
        #expect(swift.contains { abs($0) > 0.1 }, "a readout of zeros would match anything")
    }

    /// The whole engine with its device path (features in runtime-allocated memory, the graph read)
    /// against the host path (the Swift read), on the CPU provider, on real frames.
    @Test func engineWithTheGraphReadMatchesTheSwiftRead() throws {
        let width = 512, height = 288, frameSize = width * height
        let frames = try TestPaths.frames("test-sample2-512x288.bgra", width: width, height: height)
        let mask = try [UInt8](Data(contentsOf: URL(fileURLWithPath: TestPaths.dataDir + "/test-sample2-mask-512x288.gray")))
        func run(_ placement: DataPlacement) throws -> [[Float]] {
            var options = EngineOptions(modelDir: TestPaths.modelDir)
            options.dataPlacement = placement
            let engine = try MatAnyone2Engine(options: options, seed: .mask(pixels: mask, width: width, height: height))
            #expect(engine.onDevice == (placement == .device))
            var plane = [UInt8](repeating: 0, count: frameSize)
            var report = FrameReport(modelCount: engine.modelNames.count)
            var alphas: [[Float]] = []
            for frame in frames.prefix(7) {
                try frame.withUnsafeBufferPointer { pixels in
                    try plane.withUnsafeMutableBufferPointer { out in
                        try engine.matte(BGRAImage(base: pixels.baseAddress!, width: width, height: height, stride: width * 4),
                                         into: GrayImage(base: out.baseAddress!, width: width, height: height, stride: width),
                                         report: &report)
                    }
                }
                alphas.append(try #require(engine.workingAlpha()).alpha)
            }
            #expect(engine.featuresOnDevice == (placement == .device))
            return alphas
        }
        let swift = try run(.host), graph = try run(.device)
        let worst = zip(swift, graph).flatMap { zip($0, $1).map { Double(abs($0 - $1)) } }.max() ?? .infinity
        print("MatAnyone2 alpha, device path vs host path over \(swift.count) frames: max |Δ| \(worst)")
        #expect(worst <= 1e-4)
    }

    // MARK: Why a GPU provider cannot run

    private func readiness(driver: GpuReadiness.Driver, missing: [String] = [], providerPresent: Bool = true,
                           provider: ExecutionProvider = .cuda) -> GpuReadiness {
        GpuReadiness(provider: provider, providerLibrary: "/x/libonnxruntime_providers_cuda.so",
                     providerLibraryPresent: providerPresent, libraryFolders: ["/x/nvidia"], missingLibraries: missing,
                     requiredCudaVersion: 13000, driver: driver)
    }

    @Test func aReadyMachineHasNoProblems() {
        #expect(readiness(driver: .present(cudaVersion: 13010, devices: 1, initError: nil, errorName: nil)).problems.isEmpty)
    }

    @Test func anOldDriverNamesBothCudaVersionsAndTheDriverToInstall() throws {
        let problems = readiness(driver: .present(cudaVersion: 12040, devices: 1, initError: nil, errorName: nil)).problems
        let text = try #require(problems.first)
        #expect(problems.count == 1)
        #expect(text.contains("supports CUDA 12.4") && text.contains("needs CUDA 13.0") && text.contains("580 or newer"))
    }

    @Test func noGpuAndARefusingDriverAreTold() {
        let none = readiness(driver: .present(cudaVersion: 13000, devices: 0, initError: 100, errorName: "CUDA_ERROR_NO_DEVICE")).problems
        #expect(none.count == 1 && none[0].contains("no NVIDIA GPU is visible"))
        let zero = readiness(driver: .present(cudaVersion: 13000, devices: 0, initError: nil, errorName: nil)).problems
        #expect(zero.count == 1 && zero[0].contains("0 devices"))
        let refused = readiness(driver: .present(cudaVersion: 13000, devices: 0, initError: 999, errorName: "CUDA_ERROR_UNKNOWN")).problems
        #expect(refused.count == 1 && refused[0].contains("CUDA_ERROR_UNKNOWN 999") && refused[0].contains("/dev/nvidia"))
    }

    @Test func missingLibrariesAreGroupedByTheWheelThatHasThem() throws {
        let problems = readiness(driver: .missing("not found"),
                                 missing: ["libcublasLt.so.13", "libcublas.so.13", "libcudnn.so.9", "libnvinfer.so.10"],
                                 provider: .tensorrt).problems
        #expect(problems.count == 2)
        let libraries = try #require(problems.first)
        #expect(libraries.contains("libcublasLt.so.13, libcublas.so.13 (PyPI wheel nvidia-cublas)"))
        #expect(libraries.contains("libcudnn.so.9 (PyPI wheel nvidia-cudnn-cu13)"))
        #expect(libraries.contains("libnvinfer.so.10 (PyPI wheel tensorrt-cu13-libs)"))
        #expect(libraries.contains("scripts/setup.sh --gpu --tensorrt"))
        #expect(problems[1].contains("no NVIDIA driver") && problems[1].contains("CUDA itself need not be installed"))
    }

    @Test func aCpuOnlyRuntimeIsNotAGpuBuild() {
        let problems = readiness(driver: .missing("x"), providerPresent: false).problems
        #expect(problems[0].contains("libonnxruntime_providers_cuda.so is missing") && problems[0].contains("scripts/setup.sh --gpu"))
    }

    // MARK: The GPU build of ONNX Runtime, on this machine

    @Test func theGpuBuildLoadsAndListsItsProviders() throws {
        let runtime = try OnnxRuntime.shared(explicitPath: Self.gpuRuntime)
        let providers = runtime.availableProviders()
        print("GPU build \(runtime.version): \(providers)")
        #expect(providers.contains("CUDAExecutionProvider"))
        #expect(providers.contains("TensorrtExecutionProvider"))
        #expect(providers.contains("CPUExecutionProvider"))
        // Its CPU provider runs the segmenter.
        var options = EngineOptions(modelDir: TestPaths.modelDir, runtimeLibrary: Self.gpuRuntime)
        options.session.provider = .cpu
        let engine = try SegmenterEngine(options: options)
        #expect(engine.provider == .cpu && engine.providerNote == nil)
        _ = try engine.warmUp(width: 64, height: 48)
    }

    @Test func theProbeFindsWhatIsMissingHereAndTheLoadOrderOfWhatIsNot() throws {
        let probe = GpuReadiness.probe(provider: .cuda, runtimeLibrary: Self.gpuRuntime)
        #expect(probe.providerLibraryPresent)
        #expect(probe.requiredCudaVersion == 13000)
        // Only cudart and curand were installed: cuBLAS (both) and cuDNN are missing, nothing else.
        #expect(Set(probe.missingLibraries) == ["libcublas.so.13", "libcublasLt.so.13", "libcudnn.so.9"])
        let order = GpuReadiness.loadOrder(provider: .cuda, runtimeLibrary: Self.gpuRuntime).map { ($0 as NSString).lastPathComponent }
        #expect(order == ["libcudart.so.13", "libcurand.so.10"], "curand needs cudart: it must come after it")
        if case .missing = probe.driver {
            #expect(probe.problems.contains { $0.contains("no NVIDIA driver") })
        }
    }

    @Test func explicitCudaIsAnErrorThatNamesEveryMissingPieceAndAutoFallsBackWithTheReason() throws {
        var options = EngineOptions(modelDir: TestPaths.modelDir, runtimeLibrary: Self.gpuRuntime)
        options.session.provider = .cuda
        #expect {
            _ = try SegmenterEngine(options: options)
        } throws: { error in
            guard case let EngineError.gpuUnavailable(provider, problems) = error else { return false }
            let text = problems.joined(separator: " ")
            return provider == "cuda" && text.contains("libcublas.so.13") && text.contains("nvidia-cudnn-cu13")
                && text.contains("scripts/setup.sh --gpu")
        }
        options.session.provider = .auto
        let engine = try SegmenterEngine(options: options)
        #expect(engine.provider == .cpu)
        let note = try #require(engine.providerNote)
        #expect(note.hasPrefix("execution-provider=auto runs on the CPU") && note.contains("libcublas.so.13"))
    }
}

/// Deterministic random numbers for the tests (SplitMix64).
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    mutating func unit() -> Float { Float(next() >> 40) / Float(1 << 24) }
    /// Standard normal (Box–Muller).
    mutating func normal() -> Float {
        let u = max(unit(), 1e-7), v = unit()
        return (-2 * logf(u)).squareRoot() * cosf(2 * .pi * v)
    }
}
