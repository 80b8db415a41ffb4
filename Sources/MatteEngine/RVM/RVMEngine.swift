import Foundation
import MattePixels

/// Robust Video Matting (MobileNetV3; Lin et al., WACV 2022; GPL-3.0), the authors' ONNX export
/// installed by `tools/rvm/install.py`: a trained recurrent video-matting model. The frame goes in at
/// its own size; the network downsamples it by `downsample_ratio`, runs there, and its deep guided
/// filter brings the alpha back to the frame's size (no second upscale here). Four recurrent states
/// (ConvGRUs) carry time from frame to frame; they start from zeros on the first frame, after
/// `reset` (flush, seek, discontinuity, new caps), on a reseed and on a new size. It needs no seed
/// and mattes everyone in the picture at once (`max-people` is MatAnyone2's).
public final class RVMEngine: MattingEngine {
    public let kind = EngineKind.rvm
    public let modelNames = ["rvm"]
    public let directory: String
    public let providerNote: String?
    public let license: String
    public var provider: ExecutionProvider { session.provider }
    /// fp32 (the authors' file as it is), or bf16: the same file run by OpenVINO with bfloat16
    /// arithmetic on CPUs that compute it (`precision=bf16`: 1.3-1.8x faster on a Zen 4, README).
    public let precision: ModelPrecision
    /// The ratio asked for; 0: chosen from each frame size (`automaticRatio`).
    public let requestedRatio: Double
    /// The ratio the current size runs at (0 before the first frame).
    public var ratio: Double { sized?.ratio ?? 0 }
    /// Whether the network's predicted foreground colour (`fgr`) is kept for each frame (costs a
    /// 3-plane float write at the frame's size); a change applies from the next frame, states restarted.
    public var keepsForeground = false {
        didSet { if keepsForeground != oldValue { sized = nil } }
    }

    /// The range the element accepts: below 1/32 the network's internal picture of a 1080p frame is
    /// under 64 px (nothing left to matte); above 1 it would upsample.
    public static let ratioRange = 0.03125...1.0
    /// The internal size's long side that `automaticRatio` aims for: RVM's authors advise 256–512 px
    /// and give 0.25 for 1080p, 0.375 for 720p and 0.125 for 4K portraits, all 480 px.
    public static let automaticLongSide = 480.0

    /// What a frame of RVM holds, per pixel of the frame: its input and alpha, and the runtime's
    /// full-size work inside the guided filter (measured: 128 bytes a pixel more than the segmenter's
    /// run at 7680×4320, 4.3 GB in all; 1.3 GB at 4K).
    static let bytesPerPixel = 128
    /// Bytes one frame size may take (`EngineOptions.memoryBudget`).
    private let memoryBudget: Int
    private let session: Session
    private let runtime: OnnxRuntime
    private let converter = PlaneConverter()
    private static let stateNames = ["r1", "r2", "r3", "r4"]

    /// What one frame size needs: the input, the alpha, two sets of recurrent states that the two
    /// bindings read and write in turn (no copy between frames).
    private final class Sized {
        let width: Int, height: Int, ratio: Double
        let source: Tensor, ratioTensor: Tensor, alpha: Tensor, foreground: Tensor?
        let states: [[Tensor]]
        let bindings: [Binding]
        /// The binding that reads `states[current]`.
        var current = 0

        init(width: Int, height: Int, ratio: Double, source: Tensor, ratioTensor: Tensor, alpha: Tensor, foreground: Tensor?,
             states: [[Tensor]], bindings: [Binding]) {
            self.width = width
            self.height = height
            self.ratio = ratio
            self.source = source
            self.ratioTensor = ratioTensor
            self.alpha = alpha
            self.foreground = foreground
            self.states = states
            self.bindings = bindings
        }

        func reset() {
            for state in states[0] { state.fill(0) }
            current = 0
        }
    }
    private var sized: Sized?

    public convenience init(options: EngineOptions) throws {
        do {
            try self.init(unclassified: options)
        } catch {
            throw EngineError.classify(error, during: .starting)
        }
    }

    private init(unclassified options: EngineOptions) throws {
        let ratio = options.rvmDownsampleRatio
        guard ratio == 0 || RVMEngine.ratioRange.contains(ratio) else {
            throw EngineError.badSettings(detail: "downsample-ratio must be 0 (chosen from the frame size) or between "
                                          + "\(RVMEngine.ratioRange.lowerBound) and 1 (got \(ratio))")
        }
        requestedRatio = ratio
        memoryBudget = options.memoryBudget
        guard [.fp32, .bf16].contains(options.precision) else {
            throw EngineError.badSettings(detail: "precision=\(options.precision.rawValue) chooses a MatAnyone2 set; RVM runs fp32 "
                                          + "(precision=fp32, exact) or bf16 (precision=bf16, on CPUs that compute it; auto chooses)")
        }
        precision = options.precision
        // bf16 runs the fp32 file through OpenVINO (its build, the CPU's checks: as MatAnyone2's bf16).
        let set = try SingleModelSet(engine: .rvm, options: options, placement: options.precision == .bf16 ? .bf16 : nil) {
            try options.precision == .bf16 ? LocalModels.openOpenVinoRuntime(options)!
                : OnnxRuntime.shared(explicitPath: options.runtimeLibrary, for: options.session.provider)
        }
        runtime = set.runtime
        directory = set.directory
        session = set.session
        providerNote = set.providerNote
        license = set.manifest.license ?? "GPL-3.0"
        let inputs = Set(session.inputs.map(\.name)), outputs = Set(session.outputs.map(\.name))
        let needIn = Set(["src", "downsample_ratio"] + RVMEngine.stateNames.map { $0 + "i" })
        let needOut = Set(["pha"] + RVMEngine.stateNames.map { $0 + "o" })
        guard needIn.isSubset(of: inputs), needOut.isSubset(of: outputs),
              session.inputs.first(where: { $0.name == "src" })?.shape.count == 4 else {
            throw EngineError.modelInvalid(path: session.path, detail: "not Robust Video Matting's graph: it needs inputs "
                                           + needIn.sorted().joined(separator: ", ") + " and outputs "
                                           + needOut.sorted().joined(separator: ", ") + ". Re-run scripts/setup.sh")
        }
    }

    /// RVM's authors' rule: the internal picture's long side about 480 px, never upsampled.
    public static func automaticRatio(width: Int, height: Int) -> Double {
        min(1, automaticLongSide / Double(max(width, height, 1)))
    }

    public func reset() { sized?.reset() }

    /// The last frame's predicted foreground: R, G, B float planes in [0, 1] at the frame's size (nil
    /// unless `keepsForeground`, or before a frame).
    public func withForeground<T>(_ body: (UnsafePointer<Float>, _ width: Int, _ height: Int) throws -> T) rethrows -> T? {
        guard let sized, let foreground = sized.foreground else { return nil }
        return try body(foreground.data, sized.width, sized.height)
    }

    /// RVM has no seed: a reseed starts its recurrent states over, as a new stream would.
    public func reseed(_ source: SeedSource?) { reset() }

    public func matte(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        try EngineError.boundary(.processing) { try matteFrame(frame, into: alpha, report: &report) }
    }

    private func matteFrame(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        let start = monotonicMs()
        let sized = try prepare(width: frame.width, height: frame.height)
        converter.bgraToPlanarRGB(frame, into: sized.source.data, planeStride: frame.width * frame.height)
        let inferStart = monotonicMs()
        try sized.bindings[sized.current].run()
        sized.current ^= 1
        let inferEnd = monotonicMs()
        converter.planeToGray(sized.alpha.data, into: alpha)
        let end = monotonicMs()
        report.preprocessMs = inferStart - start
        report.inferenceMs = inferEnd - inferStart
        report.modelMs[0] = inferEnd - inferStart
        report.postprocessMs = end - inferEnd
        report.downsampleRatio = sized.ratio
        report.seeded = true
    }

    /// The tensors and bindings of this size, made on its first frame. The recurrent states' shapes
    /// follow from the size and the ratio inside the network (its internal picture, then strides 2 to
    /// 16 with odd sizes rounded up); rather than restate that arithmetic here, one run with the
    /// authors' 1×1×1×1 zero states asks the network itself.
    private func prepare(width: Int, height: Int) throws -> Sized {
        if let sized, sized.width == width, sized.height == height { return sized }
        sized = nil  // (the old size's tensors go before the new ones are made)
        guard let need = checkedProduct([width, height, RVMEngine.bytesPerPixel]), need <= memoryBudget else {
            throw EngineError.badSettings(detail: "RVM at \(width)×\(height) needs about "
                                          + MemoryBudget.describe(checkedProduct([width, height, RVMEngine.bytesPerPixel]) ?? Int.max)
                                          + ", over this machine's budget of \(MemoryBudget.describe(memoryBudget)) (3/4 of its memory): "
                                          + "scale the frames down before the element (videoscale), or use engine=segmenter")
        }
        let ratio = requestedRatio > 0 ? requestedRatio : RVMEngine.automaticRatio(width: width, height: height)
        let source = try Tensor(runtime: runtime, shape: [1, 3, height, width], name: "rvm src")
        let ratioTensor = try Tensor(runtime: runtime, shape: [1], name: "rvm downsample_ratio")
        ratioTensor.data[0] = Float(ratio)
        let alpha = try Tensor(runtime: runtime, shape: [1, 1, height, width], name: "rvm pha")
        let foreground = keepsForeground ? try Tensor(runtime: runtime, shape: [1, 3, height, width], name: "rvm fgr") : nil
        var probe = ["src": source, "downsample_ratio": ratioTensor]
        for name in RVMEngine.stateNames {
            probe[name + "i"] = try Tensor(runtime: runtime, shape: [1, 1, 1, 1], name: "rvm \(name) zero")
        }
        let shapes = try session.shapesOfRun(inputs: probe, outputs: RVMEngine.stateNames.map { $0 + "o" })
        let states = try (0..<2).map { set in
            try zip(RVMEngine.stateNames, shapes).map { name, shape in
                try Tensor(runtime: runtime, shape: shape, name: "rvm \(name) state \(set)")
            }
        }
        let bindings = try (0..<2).map { set in
            var inputs = ["src": source, "downsample_ratio": ratioTensor]
            var outputs = ["pha": alpha]
            if let foreground { outputs["fgr"] = foreground }
            for (index, name) in RVMEngine.stateNames.enumerated() {
                inputs[name + "i"] = states[set][index]
                outputs[name + "o"] = states[1 - set][index]
            }
            return try session.bind(inputs: inputs, outputs: outputs)
        }
        EngineLog.write(.info, "rvm: \(width)×\(height) at downsample-ratio \(ratio) (states "
                        + shapes.map { $0.map(String.init).joined(separator: "×") }.joined(separator: ", ") + ")")
        let made = Sized(width: width, height: height, ratio: ratio, source: source, ratioTensor: ratioTensor,
                         alpha: alpha, foreground: foreground, states: states, bindings: bindings)
        sized = made
        return made
    }
}
