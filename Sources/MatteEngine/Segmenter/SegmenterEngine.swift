import MattePixels

/// Per-frame person segmentation with the MediaPipe selfie segmentation model (Apache-2.0), converted
/// to ONNX by `tools/selfie/convert.py`. The frame is resampled to the model's square input (stretched,
/// not letterboxed, so the alpha maps back onto the whole frame) and the probability is resampled back.
public final class SegmenterEngine: MattingEngine {
    public let kind = EngineKind.segmenter
    public let modelNames = ["segmenter"]
    public let directory: String
    let session: Session
    public let license: String
    let input: Tensor
    let output: Tensor
    let binding: Binding
    let inputWidth: Int, inputHeight: Int
    let channelsLast: Bool
    private var down: Resampler?
    private var up: Resampler?
    private let smoothing: TemporalFilter?

    public convenience init(options: EngineOptions) throws {
        do {
            try self.init(unclassified: options)
        } catch {
            throw EngineError.classify(error, during: .starting)
        }
    }

    private init(unclassified options: EngineOptions) throws {
        let set = try SingleModelSet(engine: .segmenter, options: options) {
            try OnnxRuntime.shared(explicitPath: options.runtimeLibrary, for: options.session.provider)
        }
        let runtime = set.runtime
        directory = set.directory
        session = set.session
        providerNote = set.providerNote
        license = set.manifest.license ?? "Apache-2.0"
        guard session.inputs.count == 1, session.outputs.count >= 1 else {
            throw EngineError.modelInvalid(path: session.path, detail: "expected one image input and a mask output")
        }
        let shape = session.inputs[0].shape
        guard shape.count == 4, shape[3] == 3 || shape[1] == 3 else {
            throw EngineError.modelInvalid(path: session.path, detail: "input shape \(shape) is not an RGB image")
        }
        channelsLast = shape[3] == 3
        inputHeight = channelsLast ? shape[1] : shape[2]
        inputWidth = channelsLast ? shape[2] : shape[3]
        guard inputWidth > 0, inputHeight > 0 else {
            throw EngineError.modelInvalid(path: session.path, detail: "input shape \(shape) must be static")
        }
        let outputSpec = session.outputs[0]
        guard let outputCount = checkedProduct(outputSpec.shape), outputCount == inputWidth * inputHeight,
              inputWidth <= 8192, inputHeight <= 8192 else {
            throw EngineError.modelInvalid(path: session.path,
                                           detail: "output \(outputSpec.shape) is not one \(inputWidth)×\(inputHeight) plane")
        }
        input = try Tensor(runtime: runtime, shape: shape, name: "segmenter input")
        output = try Tensor(runtime: runtime, shape: outputSpec.shape, name: "segmenter output")
        binding = try session.bind(inputs: [session.inputs[0].name: input], outputs: [outputSpec.name: output])
        smoothing = options.temporalSmoothing > 0
            ? TemporalFilter(width: inputWidth, height: inputHeight, strength: Float(options.temporalSmoothing)) : nil
    }

    public var provider: ExecutionProvider { session.provider }
    public let providerNote: String?

    public func reset() { smoothing?.reset() }

    public func matte(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        try EngineError.boundary(.processing) { try matteFrame(frame, into: alpha, report: &report) }
    }

    private func matteFrame(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        let start = monotonicMs()
        if down?.sourceWidth != frame.width || down?.sourceHeight != frame.height {
            down = Resampler(sourceWidth: frame.width, sourceHeight: frame.height,
                             targetWidth: inputWidth, targetHeight: inputHeight)
            up = Resampler(sourceWidth: inputWidth, sourceHeight: inputHeight,
                           targetWidth: frame.width, targetHeight: frame.height)
        }
        let planeSize = inputWidth * inputHeight
        if channelsLast {
            down!.bgraToRGB(frame, into: input.data, pixelStep: 3, rowStride: inputWidth * 3, planeStride: 1)
        } else {
            down!.bgraToRGB(frame, into: input.data, pixelStep: 1, rowStride: inputWidth, planeStride: planeSize)
        }
        let inferStart = monotonicMs()
        try binding.run()
        let inferEnd = monotonicMs()
        if let smoothing {
            let pixels = input.data, channelsLast = self.channelsLast
            smoothing.apply(output.data) { i in
                channelsLast ? (pixels[3 * i], pixels[3 * i + 1], pixels[3 * i + 2])
                             : (pixels[i], pixels[planeSize + i], pixels[2 * planeSize + i])
            }
        }
        up!.resample(output.data, sourceStride: inputWidth, into: alpha)
        let end = monotonicMs()
        report.preprocessMs = inferStart - start
        report.inferenceMs = inferEnd - inferStart
        report.modelMs[0] = inferEnd - inferStart
        report.postprocessMs = end - inferEnd
        report.seeded = true
    }
}
