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

    // MARK: The glue on the device

    /// A random frame of bank input: keys, shrinkage like the encoder's (> 1), values.
    private struct RandomFrame {
        let key: [Float], shrinkage: [Float], value: [Float]
        init(keyDim: Int, valueDim: Int, tokens: Int, _ generator: inout SplitMix) {
            key = (0..<keyDim * tokens).map { _ in generator.normal() }
            shrinkage = (0..<tokens).map { _ in 1 + generator.unit() * 3 }
            value = (0..<valueDim * tokens).map { _ in generator.normal() }
        }
    }

    private func hostTensor(_ runtime: OnnxRuntime, _ values: [Float], _ shape: [Int]) throws -> Tensor {
        let tensor = try Tensor(runtime: runtime, shape: shape)
        _ = tensor.buffer.initialize(from: values)  // host storage
        return tensor
    }

    /// The Swift read of a host bank (BLAS), the reference for the graphs.
    private func swiftRead(_ bank: MemoryBank, query: [Float], selection: [Float], topK: Int) -> [Float] {
        var readout = [Float](repeating: .nan, count: bank.valueDim * bank.tokensPerFrame)
        bank.read(queryKey: query, selection: selection, topK: topK, into: &readout)
        return readout
    }

    /// The memory read graph over a host bank's own storage, on the CPU provider.
    @Test(arguments: [(64, 256, 18 * 32, 5, 1, 30), (64, 256, 18 * 32, 5, 3, 30), (64, 256, 18 * 32, 5, 7, 30),
                      (64, 256, 4, 2, 1, 30), (16, 8, 50, 3, 3, 1)])
    func graphReadoutMatchesTheSwiftRead(case: (Int, Int, Int, Int, Int, Int)) throws {
        let (keyDim, valueDim, tokens, maxFrames, frames, topK) = `case`
        var generator = SplitMix(seed: UInt64(tokens * 31 + frames))
        let bank = try MemoryBank(keyDim: keyDim, valueDim: valueDim, tokensPerFrame: tokens, maxFrames: maxFrames)
        for _ in 0..<frames {
            let frame = RandomFrame(keyDim: keyDim, valueDim: valueDim, tokens: tokens, &generator)
            bank.add(key: frame.key, shrinkage: frame.shrinkage, value: frame.value)
        }
        let query = RandomFrame(keyDim: keyDim, valueDim: valueDim, tokens: tokens, &generator)
        let selection = query.key.map { abs($0) / 3 }
        let swift = swiftRead(bank, query: query.key, selection: selection, topK: topK)

        let runtime = try OnnxRuntime.shared()
        let reader = try MemoryReadoutGraph(runtime: runtime, keyDim: keyDim, valueDim: valueDim, config: SessionConfig(provider: .cpu))
        let n = bank.frames * tokens
        let inputs = [try OrtValueView(runtime: runtime, floats: bank.keyRows, shape: [n, keyDim]),
                      try OrtValueView(runtime: runtime, floats: bank.shrinkageRows, shape: [n]),
                      try OrtValueView(runtime: runtime, floats: bank.valueRows, shape: [n, valueDim])]
        let queryKey = try hostTensor(runtime, query.key, [keyDim, tokens]), chosen = try hostTensor(runtime, selection, [keyDim, tokens])
        let last = try hostTensor(runtime, query.value.prefix(valueDim * tokens).map { $0 }, [valueDim, tokens])
        let readout = try Tensor(runtime: runtime, shape: [valueDim, tokens]), difference = try Tensor(runtime: runtime, shape: [valueDim, tokens])
        try withExtendedLifetime(inputs) {
            try reader.read(queryKey: queryKey.value, selection: chosen.value, memoryKeys: inputs[0].value, memoryShrinkage: inputs[1].value,
                            memoryValues: inputs[2].value, memoryTokens: n, lastValue: last.value, topK: topK,
                            readout: readout.value, difference: difference.value)
        }
        let graph = Array(readout.buffer)
        let worst = zip(swift, graph).map { abs($0 - $1) }.max() ?? .infinity
        print("memory readout graph vs Swift (CK \(keyDim), CV \(valueDim), HW \(tokens), \(bank.frames) frames, top-\(topK)): max |Δ| \(worst)")
        #expect(!graph.contains { $0.isNaN })
        #expect(worst <= 1e-5)
        #expect(swift.contains { abs($0) > 0.1 }, "a readout of zeros would match anything")
        let differenceWorst = zip(difference.buffer, zip(graph, last.buffer).map { $0 - $1 }).map { abs($0 - $1) }.max() ?? .infinity
        #expect(differenceWorst == 0, "difference output is readout − last value")
    }

    /// The bank in the provider's memory, written by graphs (appends, the oldest temporary frame
    /// evicted by way of the staging rows), reads as the host bank does after every frame.
    @Test(arguments: [(5, 30), (3, 30), (2, 30), (1, 7)])
    func deviceBankReadsAsTheHostBankThroughEvictions(case: (Int, Int)) throws {
        let (maxFrames, topK) = `case`
        let keyDim = 16, valueDim = 24, tokens = 6 * 10
        let runtime = try OnnxRuntime.shared()
        let graphs = try DeviceGraphs(runtime: runtime, keyDim: keyDim, valueDim: valueDim, config: SessionConfig(provider: .cpu))
        let host = try MemoryBank(keyDim: keyDim, valueDim: valueDim, tokensPerFrame: tokens, maxFrames: maxFrames)
        let device = try DeviceMemoryBank(keyDim: keyDim, valueDim: valueDim, tokensPerFrame: tokens, maxFrames: maxFrames,
                                          graphs: graphs, session: graphs.read.session)
        var generator = SplitMix(seed: UInt64(maxFrames * 7 + topK))
        let grid = [1, 1, 6, 10]
        for added in 1...(maxFrames + 4) {
            let frame = RandomFrame(keyDim: keyDim, valueDim: valueDim, tokens: tokens, &generator)
            host.add(key: frame.key, shrinkage: frame.shrinkage, value: frame.value)
            try device.add(key: try hostTensor(runtime, frame.key, [1, keyDim, 6, 10]), shrinkage: try hostTensor(runtime, frame.shrinkage, grid),
                           value: try hostTensor(runtime, frame.value, [1, valueDim, 6, 10]))
            #expect(device.frames == host.frames)
            let query = RandomFrame(keyDim: keyDim, valueDim: valueDim, tokens: tokens, &generator)
            let selection = query.key.map { abs($0) / 3 }
            let swift = swiftRead(host, query: query.key, selection: selection, topK: topK)
            let readout = try Tensor(runtime: runtime, shape: [1, valueDim, 6, 10]), difference = try Tensor(runtime: runtime, shape: [1, valueDim, 6, 10])
            try device.read(queryKey: try hostTensor(runtime, query.key, [1, keyDim, 6, 10]),
                            selection: try hostTensor(runtime, selection, [1, keyDim, 6, 10]),
                            lastValue: try hostTensor(runtime, query.value, [1, valueDim, 6, 10]), topK: topK,
                            readout: readout, difference: difference)
            let worst = zip(swift, readout.buffer).map { abs($0 - $1) }.max() ?? .infinity
            #expect(worst <= 1e-5, "after \(added) frames (\(host.frames) kept): max |Δ| \(worst)")
        }
    }

    @Test func deviceGraphsCopyBlendAndAdd() throws {
        let runtime = try OnnxRuntime.shared()
        let graphs = try DeviceGraphs(runtime: runtime, keyDim: 4, valueDim: 4, config: SessionConfig(provider: .cpu))
        var generator = SplitMix(seed: 5)
        let sources = try (0..<6).map { index in try hostTensor(runtime, (0..<(index + 1) * 10).map { _ in generator.normal() }, [1, index + 1, 2, 5]) }
        let destinations = try sources.map { try Tensor(runtime: runtime, shape: $0.shape) }
        try graphs.copy(zip(sources, destinations).map { (from: $0, to: $1) })   // six pairs: two runs
        for (source, destination) in zip(sources, destinations) { #expect(Array(source.buffer) == Array(destination.buffer)) }
        let readout = sources[2], last = try hostTensor(runtime, (0..<30).map { _ in generator.normal() }, [1, 3, 2, 5])
        let p = try hostTensor(runtime, (0..<10).map { _ in generator.unit() }, [1, 1, 2, 5])
        let visual = try Tensor(runtime: runtime, shape: [1, 3, 2, 5]), sum = try Tensor(runtime: runtime, shape: [1, 3, 2, 5])
        try graphs.blend(readout: readout, last: last, uncertainty: p, into: visual)
        try graphs.add(readout, last, into: sum)
        for index in 0..<30 {
            let q = p.buffer[index % 10]
            #expect(visual.buffer[index] == readout.buffer[index] * q + last.buffer[index] * (1 - q))
            #expect(sum.buffer[index] == readout.buffer[index] + last.buffer[index])
        }
    }

    /// The whole engine with its device path (every tensor but the frame in runtime-allocated memory,
    /// the glue as graphs; Swift touching such a tensor stops the test) against the host path, on the
    /// CPU provider, on real frames: upstream's schedule, and one that fills and evicts the bank and
    /// skips sensory updates within seven frames.
    @Test(arguments: [(5, 5, 5), (1, 3, 2)])
    func engineOnTheDevicePathMatchesTheHostPath(schedule: (Int, Int, Int)) throws {
        let width = 512, height = 288
        let frames = Array(try TestPaths.frames("test-sample2-512x288.bgra", width: width, height: height).prefix(7))
        let mask = try [UInt8](Data(contentsOf: URL(fileURLWithPath: TestPaths.dataDir + "/test-sample2-mask-512x288.gray")))
        var parameters = MatAnyone2Parameters()
        (parameters.memEvery, parameters.maxMemFrames, parameters.staggerUpdates) = schedule
        parameters.warmup = 3
        func run(_ placement: DataPlacement) throws -> [[Float]] {
            var options = EngineOptions(modelDir: TestPaths.modelDir)
            options.dataPlacement = placement
            let engine = try MatAnyone2Engine(options: options, parameters: parameters, seed: .mask(pixels: mask, width: width, height: height))
            #expect(engine.onDevice == (placement == .device))
            var alphas = try workingAlphas(engine, [frames[0]], width: width, height: height)
            let afterSeed = engine.glueBytesAcrossTheBus
            alphas += try workingAlphas(engine, Array(frames.dropFirst()), width: width, height: height)
            #expect(engine.tensorsOnDevice == (placement == .device))
            if placement == .device {
                #expect(engine.hostTensorsBoundToModels == ["encoder.image"], "only the frame may go up to the models")
                // Each ordinary frame: the alpha (padded working size, float) comes down, nothing else.
                let perFrame = (engine.glueBytesAcrossTheBus - afterSeed) / (frames.count - 1)
                print("device path, bytes a frame: frame up \(width * height * 3 * 4), alpha down \(perFrame)")
                #expect(perFrame == width * height * 4 && (engine.glueBytesAcrossTheBus - afterSeed) % (frames.count - 1) == 0)
            }
            return alphas
        }
        let swift = try run(.host), graph = try run(.device)
        let worst = zip(swift, graph).flatMap { zip($0, $1).map { Double(abs($0 - $1)) } }.max() ?? .infinity
        print("MatAnyone2 alpha, device path vs host path over \(swift.count) frames (schedule \(schedule)): max |Δ| \(worst)")
        // The two paths multiply in different orders (OpenBLAS's SGEMM against ONNX Runtime's MatMul),
        // and the top-k softmax over a bank that changes every frame magnifies that: max |Δ| measured
        // under 1e-4 on AVX2 machines, 1.9e-4 on an AVX-512 Xeon whose OpenBLAS runs its own kernels.
        // Glue that differs in substance moves alphas by 1e-2 and more; 1e-3 is also the bound of
        // parity with upstream.
        #expect(worst <= 1e-3)
        #expect(swift.last!.contains { $0 > 0.5 } && swift.last!.contains { $0 < 0.5 }, "a blank alpha would match anything")
    }

    /// A new frame size rebuilds the cores and their device state (bank, graphs' tensors): the device
    /// path goes on matching the host path, seeding again at the new size.
    @Test func theDevicePathSurvivesASizeChange() throws {
        var generator = SplitMix(seed: 11)
        func frames(_ width: Int, _ height: Int, _ count: Int) -> [[UInt8]] {
            (0..<count).map { _ in (0..<width * height * 4).map { _ in UInt8(generator.unit() * 255) } }
        }
        let (small, other) = (frames(96, 64, 3), frames(64, 96, 3))
        let mask = [UInt8](repeating: 255, count: 16)  // everything, resized to each frame
        var parameters = MatAnyone2Parameters()
        (parameters.warmup, parameters.memEvery, parameters.maxMemFrames) = (1, 1, 2)
        func run(_ placement: DataPlacement) throws -> [[Float]] {
            var options = EngineOptions(modelDir: TestPaths.modelDir)
            options.dataPlacement = placement
            let engine = try MatAnyone2Engine(options: options, parameters: parameters, workingShortSide: 64,
                                              seed: .mask(pixels: mask, width: 4, height: 4))
            var alphas = try workingAlphas(engine, small, width: 96, height: 64)
            alphas += try workingAlphas(engine, other, width: 64, height: 96)
            alphas += try workingAlphas(engine, small, width: 96, height: 64)
            return alphas
        }
        let host = try run(.host), device = try run(.device)
        #expect(host.count == 9 && device.count == 9)
        let worst = zip(host, device).flatMap { zip($0, $1).map { Double(abs($0 - $1)) } }.max() ?? .infinity
        #expect(worst <= 1e-4, "max |Δα| \(worst)")
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

    @Test func aGpuDeviceTheDriverDoesNotSeeIsNamedWithTheRangeThatExists() throws {
        #expect(GpuReadiness.deviceProblem(0, of: 1) == nil && GpuReadiness.deviceProblem(3, of: 4) == nil)
        let one = try #require(GpuReadiness.deviceProblem(1, of: 1))
        #expect(one.contains("gpu-device=1") && one.contains("sees 1 GPU (only gpu-device=0)") && one.contains("CUDA_VISIBLE_DEVICES"))
        let four = try #require(GpuReadiness.deviceProblem(7, of: 4))
        #expect(four.contains("sees 4 GPUs (gpu-device=0 to 3)"))
        // No GPU at all is the driver's problem, reported by `problems`, not a device number's.
        #expect(GpuReadiness.deviceProblem(0, of: 0) == nil)
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
