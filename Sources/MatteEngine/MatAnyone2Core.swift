import Foundation

/// MatAnyone2 tuning, upstream defaults.
public struct MatAnyone2Parameters: Equatable, Sendable {
    public var memEvery = 5
    public var maxMemFrames = 5
    public var topK = 30
    /// Extra first-frame passes; upstream's script runs 10 plus the real frame 0.
    public var warmup = 10
    public var staggerUpdates = 5
    public var seedDilate = 10
    public var seedErode = 10
    public init() {}

    func validate() throws {
        guard memEvery >= 1 else { throw EngineError.badSettings(detail: "mem-every must be at least 1 (got \(memEvery))") }
        guard maxMemFrames >= 1 else {
            throw EngineError.badSettings(detail: "max-mem-frames must be at least 1 (got \(maxMemFrames))")
        }
        guard topK >= 1 else { throw EngineError.badSettings(detail: "top-k must be at least 1 (got \(topK))") }
    }
}

/// The MatAnyone2 step schedule for one object at one working size, on the exported model set.
/// A line-by-line port of `tools/matanyone2/glue.py` (the spec, checked against upstream PyTorch):
/// all state lives here, the six ONNX models are stateless.
final class MatAnyone2Core {
    static let modelNames = ["encoder", "uncert", "readout", "decoder", "maskencoder", "memframe"]
    enum Model: Int { case encoder, uncert, readout, decoder, maskencoder, memframe }

    let parameters: MatAnyone2Parameters
    /// Working size and its padding to multiples of 16 (centred, extra row/column at the end).
    let width: Int, height: Int
    let paddedWidth: Int, paddedHeight: Int
    let padTop: Int, padLeft: Int
    let gridTokens: Int

    // Tensors (storage owned here, bound once to the model calls that read or write them).
    let image: Tensor
    private let f8, f4, f2, f1, pixFeat, key, shrinkage, selection: Tensor
    private let sensory, lastAlpha, lastPixFeat, lastMaskValue, objectMemory: Tensor
    private let memoryReadout, memoryValueDifference, uncertainty, visualReadout, memReadout: Tensor
    private let decodedAlpha, decodedSensory, memoryFrameSensory, objectSummary: Tensor

    private let encode, estimateUncertainty, readoutFromMemory, readoutFirstFrame, decode, encodeMask, memorizeFrame: Binding
    private let bank: MemoryBank
    private let staggerTimes: Set<Int>

    // Upstream's curr_ti / last_mem_ti.
    private var t = -1
    private var lastMemoryT = 0
    private var hasObjectMemory = false
    private(set) var started = false

    /// Per-model time of the current frame (ms), indexed like `modelNames`, and the memory read.
    var modelMs = [Double](repeating: 0, count: 6)
    var memoryMs = 0.0

    init(manifest: ModelManifest, sessions: [String: Session], width: Int, height: Int,
         parameters: MatAnyone2Parameters) throws {
        try parameters.validate()
        self.parameters = parameters
        self.width = width
        self.height = height
        // Multiples of 16, and at least two grid cells a side (the exported dynamic range starts there).
        paddedHeight = max(32, (height + 15) / 16 * 16)
        paddedWidth = max(32, (width + 15) / 16 * 16)
        padTop = (paddedHeight - height) / 2
        padLeft = (paddedWidth - width) / 2
        gridTokens = (paddedHeight / 16) * (paddedWidth / 16)
        let runtime = sessions["encoder"]!.runtime
        let (h, w) = (paddedHeight, paddedWidth)
        func make(_ model: String, _ port: String, output: Bool = false) throws -> Tensor {
            let ports = output ? manifest.models[model]!.outputs : manifest.models[model]!.inputs
            guard let spec = ports.first(where: { $0.name == port }) else {
                throw EngineError.modelInvalid(path: model, detail: "manifest lists no \(output ? "output" : "input") '\(port)' for '\(model)'")
            }
            return try Tensor(runtime: runtime, shape: spec.concreteShape(height: h, width: w))
        }
        image = try make("encoder", "image")
        f8 = try make("encoder", "f8", output: true)
        f4 = try make("encoder", "f4", output: true)
        f2 = try make("encoder", "f2", output: true)
        f1 = try make("encoder", "f1", output: true)
        pixFeat = try make("encoder", "pix_feat", output: true)
        key = try make("encoder", "key", output: true)
        shrinkage = try make("encoder", "shrinkage", output: true)
        selection = try make("encoder", "selection", output: true)
        sensory = try make("decoder", "sensory")
        lastAlpha = try make("decoder", "alpha", output: true)
        lastPixFeat = try make("uncert", "last_pix_feat")
        lastMaskValue = try make("maskencoder", "mask_value", output: true)
        objectMemory = try make("readout", "obj_memory")
        memoryReadout = try make("readout", "visual_readout")
        memoryValueDifference = try make("uncert", "mem_val_diff")
        uncertainty = try make("uncert", "uncert_prob", output: true)
        visualReadout = try make("readout", "visual_readout")
        memReadout = try make("readout", "mem_readout", output: true)
        decodedAlpha = try make("decoder", "alpha", output: true)
        decodedSensory = try make("decoder", "sensory_out", output: true)
        memoryFrameSensory = try make("memframe", "sensory_out", output: true)
        objectSummary = try make("memframe", "obj_summary", output: true)

        encode = try sessions["encoder"]!.bind(
            inputs: ["image": image],
            outputs: ["f8": f8, "f4": f4, "f2": f2, "f1": f1, "pix_feat": pixFeat, "key": key,
                      "shrinkage": shrinkage, "selection": selection])
        estimateUncertainty = try sessions["uncert"]!.bind(
            inputs: ["last_pix_feat": lastPixFeat, "pix_feat": pixFeat, "last_mask": lastAlpha,
                     "mem_val_diff": memoryValueDifference],
            outputs: ["uncert_prob": uncertainty])
        readoutFromMemory = try sessions["readout"]!.bind(
            inputs: ["pix_feat": pixFeat, "visual_readout": visualReadout, "sensory": sensory,
                     "last_mask": lastAlpha, "obj_memory": objectMemory],
            outputs: ["mem_readout": memReadout])
        // First-frame passes read no memory: the pixel-memory input is the last mask value itself.
        readoutFirstFrame = try sessions["readout"]!.bind(
            inputs: ["pix_feat": pixFeat, "visual_readout": lastMaskValue, "sensory": sensory,
                     "last_mask": lastAlpha, "obj_memory": objectMemory],
            outputs: ["mem_readout": memReadout])
        decode = try sessions["decoder"]!.bind(
            inputs: ["f8": f8, "f4": f4, "f2": f2, "f1": f1, "mem_readout": memReadout, "sensory": sensory],
            outputs: ["alpha": decodedAlpha, "sensory_out": decodedSensory])
        encodeMask = try sessions["maskencoder"]!.bind(
            inputs: ["f1": f1, "pix_feat": pixFeat, "mask": lastAlpha],
            outputs: ["mask_value": lastMaskValue])
        memorizeFrame = try sessions["memframe"]!.bind(
            inputs: ["mask_value": lastMaskValue, "sensory": sensory, "mask": lastAlpha],
            outputs: ["sensory_out": memoryFrameSensory, "obj_summary": objectSummary])

        let keyDim = key.shape[1], valueDim = lastMaskValue.shape[1]
        guard key.count == keyDim * gridTokens, lastMaskValue.count == valueDim * gridTokens else {
            throw EngineError.modelInvalid(path: "manifest.json", detail: "key/value shapes do not match the stride-16 grid")
        }
        bank = MemoryBank(keyDim: keyDim, valueDim: valueDim, tokensPerFrame: gridTokens,
                          maxFrames: parameters.maxMemFrames)
        // (t − last_mem_t) values at which the decoder's sensory update is kept.
        if parameters.staggerUpdates >= parameters.memEvery {
            staggerTimes = Set(1...parameters.memEvery)
        } else {
            let count = max(parameters.staggerUpdates, 1)
            staggerTimes = Set((0..<count).map { i -> Int in
                let position = count == 1 ? 1.0 : 1.0 + Double(parameters.memEvery - 1) * Double(i) / Double(count - 1)
                return Int(position.rounded(.toNearestOrEven))
            })
        }
    }

    var memoryFrames: Int { bank.frames }

    /// The unpadded alpha of the last frame: `height` rows of `width`, `paddedWidth` apart.
    var alpha: UnsafePointer<Float> { UnsafePointer(lastAlpha.data + padTop * paddedWidth + padLeft) }

    /// Where to write the frame: RGB planes in [0, 1], `paddedWidth` per row, padding left at zero.
    var imageOrigin: UnsafeMutablePointer<Float> { image.data + padTop * paddedWidth + padLeft }
    var imagePlaneStride: Int { paddedWidth * paddedHeight }

    func reset() {
        t = -1
        lastMemoryT = 0
        hasObjectMemory = false
        started = false
        bank.clear()
    }

    private func run(_ binding: Binding, _ model: Model) throws {
        let start = monotonicMs()
        try binding.run()
        modelMs[model.rawValue] += monotonicMs() - start
    }

    /// Seed step with `seed` (alpha in {0, 1}, `height`×`width`), then warmup + 1 first-frame passes
    /// (`warmupPasses` overrides the warm-up count).
    /// The frame must already be in `image`.
    func start(seed: [Float], warmupPasses: Int? = nil) throws {
        reset()
        t = 0
        try run(encode, .encoder)  // frame 0's encoding is reused by every pass below
        lastAlpha.fill(0)
        for y in 0..<height {
            let row = lastAlpha.data + (padTop + y) * paddedWidth + padLeft
            for x in 0..<width { row[x] = seed[y * width + x] }
        }
        sensory.fill(0)
        lastPixFeat.copy(from: pixFeat)
        try memorize()
        for _ in 0...(warmupPasses ?? parameters.warmup) { try firstFramePass() }
        started = true
    }

    /// Upstream `step(image, first_frame_pred=True)`: t forced to 0, no memory read, sensory always
    /// updated; then working and object memory are cleared and this frame becomes the permanent one.
    private func firstFramePass() throws {
        t = 0
        lastMemoryT = 0
        try run(readoutFirstFrame, .readout)
        try run(decode, .decoder)
        sensory.copy(from: decodedSensory)
        lastAlpha.copy(from: decodedAlpha)
        lastPixFeat.copy(from: pixFeat)
        bank.clear()
        hasObjectMemory = false
        try memorize()
    }

    /// Upstream `_add_memory(..., is_deep_update=True)` for the current frame with `lastAlpha`.
    private func memorize() throws {
        try run(encodeMask, .maskencoder)     // → lastMaskValue
        try run(memorizeFrame, .memframe)     // deep sensory update + object summary
        if hasObjectMemory {
            for index in 0..<objectMemory.count { objectMemory.data[index] += objectSummary.data[index] }
        } else {
            objectMemory.copy(from: objectSummary)
            hasObjectMemory = true
        }
        bank.add(key: key.data, shrinkage: shrinkage.data, value: lastMaskValue.data)
        lastMemoryT = t
        sensory.copy(from: memoryFrameSensory)
    }

    /// One ordinary frame (t ≥ 1); the frame must already be in `image`.
    func step() throws {
        precondition(started)
        t += 1
        let sinceMemory = t - lastMemoryT
        let isMemoryFrame = sinceMemory >= parameters.memEvery
        let updateSensory = staggerTimes.contains(sinceMemory)
        try run(encode, .encoder)

        let readStart = monotonicMs()
        bank.read(queryKey: key.data, selection: selection.data, topK: parameters.topK, into: memoryReadout.data)
        memoryMs += monotonicMs() - readStart

        let count = memoryReadout.count
        let readout = memoryReadout.data, last = lastMaskValue.data
        for index in 0..<count { memoryValueDifference.data[index] = readout[index] - last[index] }
        try run(estimateUncertainty, .uncert)
        // visual = readout·p + last_mask_value·(1 − p), p broadcast over channels.
        let tokens = gridTokens, p = uncertainty.data, visual = visualReadout.data
        for channel in 0..<(count / tokens) {
            let base = channel * tokens
            for q in 0..<tokens { visual[base + q] = readout[base + q] * p[q] + last[base + q] * (1 - p[q]) }
        }
        try run(readoutFromMemory, .readout)
        try run(decode, .decoder)
        if updateSensory { sensory.copy(from: decodedSensory) }
        lastAlpha.copy(from: decodedAlpha)
        lastPixFeat.copy(from: pixFeat)
        if isMemoryFrame {
            try memorize()
        } else {
            try run(encodeMask, .maskencoder)
        }
    }

    func clearTimings() {
        for index in modelMs.indices { modelMs[index] = 0 }
        memoryMs = 0
    }
}
