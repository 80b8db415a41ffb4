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
    /// People tracked at once, each with its own memory bank (the encoder runs once for all).
    public var maxPeople = 1
    /// The quality watch (off by default in the engine; the element turns it on).
    public var watch = WatchSettings()
    /// The alpha while nobody is tracked (255: the frame passes through; 0: nothing shows).
    public var noPersonAlpha: UInt8 = 255
    public init() {}

    public static let peopleLimit = 8

    func validate() throws {
        guard memEvery >= 1 else { throw EngineError.badSettings(detail: "mem-every must be at least 1 (got \(memEvery))") }
        guard maxMemFrames >= 1 else {
            throw EngineError.badSettings(detail: "max-mem-frames must be at least 1 (got \(maxMemFrames))")
        }
        guard topK >= 1 else { throw EngineError.badSettings(detail: "top-k must be at least 1 (got \(topK))") }
        guard (1...MatAnyone2Parameters.peopleLimit).contains(maxPeople) else {
            throw EngineError.badSettings(detail: "max-people must be 1 to \(MatAnyone2Parameters.peopleLimit) (got \(maxPeople))")
        }
        guard watch.interval >= 0, watch.patience >= 1, (0...1).contains(watch.minimumIoU),
              (0...1).contains(watch.maximumUncertainty) else {
            throw EngineError.badSettings(detail: "watch settings out of range: \(watch)")
        }
    }
}

/// The MatAnyone2 step schedule for one object at one working size, on the exported model set.
/// A line-by-line port of `tools/matanyone2/glue.py` (the spec, checked against upstream PyTorch):
/// all state lives here, the six ONNX models are stateless. Several people are several cores: the
/// first owns the encoder's outputs and runs the encoder once per frame (`encode()`), the others
/// share those tensors (`sharingEncoderWith`) and keep their own memory bank and state.
final class MatAnyone2Core {
    /// The six models, in the order of `FrameReport.modelMs`.
    enum Model: String, CaseIterable {
        case encoder, uncert, readout, decoder, maskencoder, memframe
    }
    static let modelNames = Model.allCases.map(\.rawValue)

    let parameters: MatAnyone2Parameters
    /// Working size and its padding to multiples of 16 (centred, extra row/column at the end).
    let width: Int, height: Int
    let paddedWidth: Int, paddedHeight: Int
    let padTop: Int, padLeft: Int
    let gridTokens: Int

    private let tensors: Tensors
    private let calls: Calls
    /// Where the frame goes (RGB planes, see `imageOrigin`).
    var image: Tensor { tensors.image }
    /// Where the glue keeps its state and does its arithmetic.
    private let glue: Glue
    private let staggerTimes: Set<Int>

    // Upstream's curr_ti / last_mem_ti.
    private var t = -1
    private var lastMemoryT = 0
    private var hasObjectMemory = false
    private(set) var started = false

    /// Per-model time of the current frame (ms), indexed like `Model.allCases`, and the memory read.
    var modelMs = [Double](repeating: 0, count: Model.allCases.count)
    var memoryMs = 0.0

    /// The padded size for a working size: multiples of 16, and at least two grid cells a side (the
    /// exported dynamic range starts there).
    static func paddedSize(width: Int, height: Int) -> (width: Int, height: Int) {
        (max(32, (width + 15) / 16 * 16), max(32, (height + 15) / 16 * 16))
    }

    /// Makes the tensors of one model port at the padded size; errors name the manifest file.
    struct TensorMaker {
        let manifest: ModelManifest
        let manifestPath: String
        let runtime: OnnxRuntime
        let height: Int, width: Int
        /// When set, tensors made `onDevice` (all but the frame) live in memory this session's provider allocates.
        var deviceSession: Session?

        func callAsFunction(_ model: Model, _ port: String, output: Bool = false, onDevice: Bool = true) throws -> Tensor {
            let ports = output ? manifest.models[model.rawValue]?.outputs : manifest.models[model.rawValue]?.inputs
            guard let spec = ports?.first(where: { $0.name == port }) else {
                throw EngineError.modelInvalid(path: manifestPath, detail: "lists no \(output ? "output" : "input") "
                                               + "'\(port)' for model '\(model.rawValue)'. Re-export the model set.")
            }
            do {
                let shape = try spec.concreteShape(height: height, width: width)
                if onDevice, let deviceSession {
                    return try Tensor(onDeviceOf: deviceSession, shape: shape, name: "\(model.rawValue).\(port)")
                }
                return try Tensor(runtime: runtime, shape: shape, name: "\(model.rawValue).\(port)")
            } catch let EngineError.modelInvalid(_, detail) {
                throw EngineError.modelInvalid(path: manifestPath, detail: "model '\(model.rawValue)': \(detail)")
            }
        }
    }

    init(manifest: ModelManifest, manifestPath: String, sessions: [String: Session], width: Int, height: Int,
         parameters: MatAnyone2Parameters, deviceGraphs: DeviceGraphs? = nil,
         sharingEncoderWith primary: MatAnyone2Core? = nil) throws {
        try parameters.validate()
        self.parameters = parameters
        self.width = width
        self.height = height
        (paddedWidth, paddedHeight) = MatAnyone2Core.paddedSize(width: width, height: height)
        padTop = (paddedHeight - height) / 2
        padLeft = (paddedWidth - width) / 2
        gridTokens = (paddedHeight / 16) * (paddedWidth / 16)
        let make = TensorMaker(manifest: manifest, manifestPath: manifestPath, runtime: sessions[Model.encoder.rawValue]!.runtime,
                               height: paddedHeight, width: paddedWidth,
                               deviceSession: deviceGraphs == nil ? nil : sessions[Model.encoder.rawValue])
        if let primary, primary.paddedWidth != paddedWidth || primary.paddedHeight != paddedHeight {
            throw EngineError.badSettings(detail: "cores sharing an encoder must have the same working size")
        }
        let tensors = try Tensors(make, sharing: primary?.tensors)
        try tensors.checkLayout(manifestPath: manifestPath, paddedHeight: paddedHeight, paddedWidth: paddedWidth)
        let keyDim = tensors.key.shape[1], valueDim = tensors.lastMaskValue.shape[1]
        guard tensors.key.count == keyDim * gridTokens, tensors.lastMaskValue.count == valueDim * gridTokens else {
            throw EngineError.modelInvalid(path: manifestPath, detail: "the key and value shapes \(tensors.key.shape), "
                                           + "\(tensors.lastMaskValue.shape) are not channels × the stride-16 grid. Re-export the model set.")
        }
        if let deviceGraphs {
            if deviceGraphs.read.keyDim != keyDim || deviceGraphs.read.valueDim != valueDim {
                throw EngineError.modelInvalid(path: manifestPath, detail: "the memory readout graph was built for other key/value widths")
            }
            glue = .device(try DeviceGlue(graphs: deviceGraphs, session: sessions[Model.encoder.rawValue]!, runtime: make.runtime,
                                          alphaShape: tensors.lastAlpha.shape, sensoryShape: tensors.sensory.shape,
                                          objectMemoryShape: tensors.objectMemory.shape, uncertaintyShape: tensors.uncertainty.shape,
                                          tokens: gridTokens, maxFrames: parameters.maxMemFrames))
        } else {
            glue = .host(try MemoryBank(keyDim: keyDim, valueDim: valueDim, tokensPerFrame: gridTokens, maxFrames: parameters.maxMemFrames))
        }
        calls = try Calls(sessions: sessions, tensors)
        self.tensors = tensors
        staggerTimes = MatAnyone2Core.staggerTimes(memEvery: parameters.memEvery, staggerUpdates: parameters.staggerUpdates)
    }

    /// (t − last_mem_t) values at which the decoder's sensory update is kept (upstream's stagger).
    private static func staggerTimes(memEvery: Int, staggerUpdates: Int) -> Set<Int> {
        if staggerUpdates >= memEvery { return Set(1...memEvery) }
        let count = max(staggerUpdates, 1)
        return Set((0..<count).map { i -> Int in
            let position = count == 1 ? 1.0 : 1.0 + Double(memEvery - 1) * Double(i) / Double(count - 1)
            return Int(position.rounded(.toNearestOrEven))
        })
    }

    var memoryFrames: Int { glue.memoryFrames }
    /// Whether the models' tensors live in the provider's memory (see `Tensors`).
    var onDevice: Bool { tensors.key.isOnDevice }
    var keyDim: Int { tensors.key.shape[1] }
    /// The host tensors the models read or write (with data on the device: the frame alone).
    var hostTensorsBoundToModels: Set<String> {
        Set(calls.all.flatMap { $0.inputs + $0.outputs }.filter { !$0.isOnDevice }.map(\.name))
    }
    var valueDim: Int { tensors.lastMaskValue.shape[1] }

    /// MatAnyone2's uncertainty (uncert_prob) of the last ordinary frame, averaged over the grid cells
    /// whose centre lies on the person (all cells when none does).
    func meanUncertainty(over person: [Bool]) throws -> Double {
        var uncertainty = tensors.uncertainty
        if case let .device(device) = glue {
            try device.graphs.copy([(from: tensors.uncertainty, to: device.uncertaintyDownloaded)])
            uncertainty = device.uncertaintyDownloaded
        }
        return MatAnyone2Core.meanUncertainty(uncertainty.data, columns: paddedWidth / 16, rows: paddedHeight / 16, padTop: padTop,
                                              padLeft: padLeft, width: width, height: height, over: person)
    }

    /// The mean of a stride-16 grid of uncertainties over the cells whose centre lies on `person` (a
    /// mask of the unpadded working size), or over all cells when none does.
    static func meanUncertainty(_ grid: UnsafePointer<Float>, columns: Int, rows: Int, padTop: Int, padLeft: Int,
                                width: Int, height: Int, over person: [Bool]) -> Double {
        var onPerson = 0.0, count = 0, everywhere = 0.0
        for row in 0..<rows {
            for column in 0..<columns {
                let p = Double(grid[row * columns + column])
                everywhere += p
                let y = row * 16 + 8 - padTop, x = column * 16 + 8 - padLeft
                if y >= 0, y < height, x >= 0, x < width, person[y * width + x] {
                    onPerson += p
                    count += 1
                }
            }
        }
        return count > 0 ? onPerson / Double(count) : everywhere / Double(max(rows * columns, 1))
    }
    /// The unpadded alpha of the last frame: `height` rows of `width`, `paddedWidth` apart.
    var alpha: UnsafePointer<Float> { UnsafePointer(hostAlpha.data + padTop * paddedWidth + padLeft) }

    /// The padded alpha in host memory: the current one itself, or on a device its copy (each frame's
    /// comes down there; a seed goes up from there).
    private var hostAlpha: Tensor {
        switch glue {
        case .host: return tensors.lastAlpha
        case let .device(device): return device.alphaDownloaded
        }
    }

    /// Where to write the frame: RGB planes in [0, 1], `paddedWidth` per row, padding left at zero.
    var imageOrigin: UnsafeMutablePointer<Float> { image.data + padTop * paddedWidth + padLeft }
    var imagePlaneStride: Int { paddedWidth * paddedHeight }

    func reset() {
        t = -1
        lastMemoryT = 0
        hasObjectMemory = false
        started = false
        glue.clearBank()
    }

    private func run(_ binding: Binding, _ model: Model) throws {
        let start = monotonicMs()
        try binding.run()
        modelMs[Model.allCases.firstIndex(of: model)!] += monotonicMs() - start
    }

    /// Seed step with `seed` (alpha in {0, 1}, `height`×`width`), then warmup + 1 first-frame passes
    /// (`warmupPasses` overrides the warm-up count).
    /// The frame must already be in `image`.
    func start(seed: [Float], warmupPasses: Int? = nil, encoded: Bool = false) throws {
        reset()
        t = 0
        if !encoded { try encode() }  // frame 0's encoding is reused by every pass below
        // The seed goes into the alpha (on a device by way of its host copy, the one upload of a seed).
        let seedAlpha = hostAlpha
        seedAlpha.fill(0)
        for y in 0..<height {
            let row = seedAlpha.data + (padTop + y) * paddedWidth + padLeft
            for x in 0..<width { row[x] = seed[y * width + x] }
        }
        switch glue {
        case .host:
            tensors.sensory.fill(0)
            tensors.lastPixFeat.copy(from: tensors.pixFeat)
        case let .device(device):
            try device.graphs.copy([(from: seedAlpha, to: tensors.lastAlpha), (from: device.zeroSensory, to: tensors.sensory),
                                    (from: tensors.pixFeat, to: tensors.lastPixFeat)])
        }
        try memorize()
        for _ in 0...(warmupPasses ?? parameters.warmup) { try firstFramePass() }
        started = true
    }

    /// Upstream `step(image, first_frame_pred=True)`: t forced to 0, no memory read, sensory always
    /// updated; then working and object memory are cleared and this frame becomes the permanent one.
    private func firstFramePass() throws {
        t = 0
        lastMemoryT = 0
        try run(calls.readoutFirstFrame, .readout)
        try run(calls.decode, .decoder)
        try commitDecoded(updatingSensory: true)
        glue.clearBank()
        hasObjectMemory = false
        try memorize()
    }

    /// The decoder's alpha (and sensory state, when kept) become the current ones, this frame's pixel
    /// features the last ones; on a device the alpha also comes down to host memory, once a frame.
    private func commitDecoded(updatingSensory: Bool) throws {
        switch glue {
        case .host:
            if updatingSensory { tensors.sensory.copy(from: tensors.decodedSensory) }
            tensors.lastAlpha.copy(from: tensors.decodedAlpha)
            tensors.lastPixFeat.copy(from: tensors.pixFeat)
        case let .device(device):
            var pairs = [(from: tensors.decodedAlpha, to: tensors.lastAlpha), (from: tensors.decodedAlpha, to: device.alphaDownloaded),
                         (from: tensors.pixFeat, to: tensors.lastPixFeat)]
            if updatingSensory { pairs.append((from: tensors.decodedSensory, to: tensors.sensory)) }
            try device.graphs.copy(pairs)
        }
    }

    /// Upstream `_add_memory(..., is_deep_update=True)` for the current frame with `lastAlpha`.
    private func memorize() throws {
        try run(calls.encodeMask, .maskencoder)     // → lastMaskValue
        try run(calls.memorizeFrame, .memframe)     // deep sensory update + object summary
        switch glue {
        case let .host(bank):
            if hasObjectMemory {
                for index in 0..<tensors.objectMemory.count { tensors.objectMemory.data[index] += tensors.objectSummary.data[index] }
            } else {
                tensors.objectMemory.copy(from: tensors.objectSummary)
            }
            bank.add(key: tensors.key.data, shrinkage: tensors.shrinkage.data, value: tensors.lastMaskValue.data)
            tensors.sensory.copy(from: tensors.memoryFrameSensory)
        case let .device(device):
            // A graph cannot write into its own input: the sum goes by way of `objectMemorySum`.
            var summary = tensors.objectSummary
            if hasObjectMemory {
                try device.graphs.add(tensors.objectMemory, tensors.objectSummary, into: device.objectMemorySum)
                summary = device.objectMemorySum
            }
            try device.graphs.copy([(from: summary, to: tensors.objectMemory), (from: tensors.memoryFrameSensory, to: tensors.sensory)])
            try device.bank.add(key: tensors.key, shrinkage: tensors.shrinkage, value: tensors.lastMaskValue)
        }
        hasObjectMemory = true
        lastMemoryT = t
    }

    /// Runs the encoder on the frame in `image` (for every core sharing this one's encoder outputs).
    func encode() throws { try run(calls.encode, .encoder) }

    /// One ordinary frame (t ≥ 1); the frame must already be in `image`, and encoded when `encoded`.
    func step(encoded: Bool = false) throws {
        precondition(started)
        t += 1
        let sinceMemory = t - lastMemoryT
        let isMemoryFrame = sinceMemory >= parameters.memEvery
        let updateSensory = staggerTimes.contains(sinceMemory)
        if !encoded { try encode() }

        let readStart = monotonicMs()
        switch glue {
        case let .host(bank):
            bank.read(queryKey: tensors.key.data, selection: tensors.selection.data, topK: parameters.topK, into: tensors.bankReadout.data)
            let readout = tensors.bankReadout.data, last = tensors.lastMaskValue.data
            for index in 0..<tensors.bankReadout.count { tensors.memoryValueDifference.data[index] = readout[index] - last[index] }
        case let .device(device):
            try device.bank.read(queryKey: tensors.key, selection: tensors.selection, lastValue: tensors.lastMaskValue,
                                 topK: parameters.topK, readout: tensors.bankReadout, difference: tensors.memoryValueDifference)
        }
        memoryMs += monotonicMs() - readStart

        try run(calls.estimateUncertainty, .uncert)
        // visual = readout·p + last_mask_value·(1 − p), p broadcast over channels.
        switch glue {
        case .host:
            let readout = tensors.bankReadout.data, last = tensors.lastMaskValue.data
            let tokens = gridTokens, p = tensors.uncertainty.data, visual = tensors.blendedReadout.data
            for channel in 0..<(tensors.bankReadout.count / tokens) {
                let base = channel * tokens
                for q in 0..<tokens { visual[base + q] = readout[base + q] * p[q] + last[base + q] * (1 - p[q]) }
            }
        case let .device(device):
            try device.graphs.blend(readout: tensors.bankReadout, last: tensors.lastMaskValue, uncertainty: tensors.uncertainty,
                                    into: tensors.blendedReadout)
        }
        try run(calls.readoutFromMemory, .readout)
        try run(calls.decode, .decoder)
        try commitDecoded(updatingSensory: updateSensory)
        if isMemoryFrame {
            try memorize()
        } else {
            try run(calls.encodeMask, .maskencoder)
        }
    }

    func clearTimings() {
        for index in modelMs.indices { modelMs[index] = 0 }
        memoryMs = 0
    }
}

/// The tensors of one working size: storage owned here, bound once to the model calls that read or
/// write them.
private struct Tensors {
    let image, f8, f4, f2, f1, pixFeat, key, shrinkage, selection: Tensor
    let sensory, lastAlpha, lastPixFeat, lastMaskValue, objectMemory: Tensor
    /// By role: `bankReadout` is what the memory bank's read returns (affinity × values);
    /// `blendedReadout` that readout blended with the last mask value where the frame is uncertain,
    /// the readout model's `visual_readout` (so both take that port's shape); `objectReadout` the
    /// readout model's output after the object transformer, the decoder's `mem_readout`.
    let bankReadout, memoryValueDifference, uncertainty, blendedReadout, objectReadout: Tensor
    let decodedAlpha, decodedSensory, memoryFrameSensory, objectSummary: Tensor

    /// `shared`: another core's tensors whose encoder input and outputs these reuse (one encoding
    /// per frame for several people).
    init(_ make: MatAnyone2Core.TensorMaker, sharing shared: Tensors? = nil) throws {
        if let shared {
            (image, f8, f4, f2, f1) = (shared.image, shared.f8, shared.f4, shared.f2, shared.f1)
            (pixFeat, key, shrinkage, selection) = (shared.pixFeat, shared.key, shared.shrinkage, shared.selection)
        } else {
            // With a device session, everything but the frame lives in the provider's memory, where
            // only the models and the built-in graphs touch it: the multi-scale features (~370 MB a
            // frame at 1920×1088, from the encoder to the decoder and mask encoder) and the state.
            image = try make(.encoder, "image", onDevice: false)
            f8 = try make(.encoder, "f8", output: true)
            f4 = try make(.encoder, "f4", output: true)
            f2 = try make(.encoder, "f2", output: true)
            f1 = try make(.encoder, "f1", output: true)
            pixFeat = try make(.encoder, "pix_feat", output: true)
            key = try make(.encoder, "key", output: true)
            shrinkage = try make(.encoder, "shrinkage", output: true)
            selection = try make(.encoder, "selection", output: true)
        }
        sensory = try make(.decoder, "sensory")
        lastAlpha = try make(.decoder, "alpha", output: true)
        lastPixFeat = try make(.uncert, "last_pix_feat")
        lastMaskValue = try make(.maskencoder, "mask_value", output: true)
        objectMemory = try make(.readout, "obj_memory")
        bankReadout = try make(.readout, "visual_readout")
        memoryValueDifference = try make(.uncert, "mem_val_diff")
        uncertainty = try make(.uncert, "uncert_prob", output: true)
        blendedReadout = try make(.readout, "visual_readout")
        objectReadout = try make(.readout, "mem_readout", output: true)
        decodedAlpha = try make(.decoder, "alpha", output: true)
        decodedSensory = try make(.decoder, "sensory_out", output: true)
        memoryFrameSensory = try make(.memframe, "sensory_out", output: true)
        objectSummary = try make(.memframe, "obj_summary", output: true)
    }

    /// The glue writes and combines these tensors itself (the frame into `image`, the seed into the
    /// alpha, element-wise blends between equal-sized ones): a manifest whose shapes disagree would
    /// make it write past their ends, so they are checked here, naming the manifest.
    func checkLayout(manifestPath: String, paddedHeight h: Int, paddedWidth w: Int) throws {
        let exact: [(String, Tensor, [Int])] = [
            ("encoder image", image, [1, 3, h, w]),
            ("decoder alpha", lastAlpha, [1, 1, h, w]),
            ("encoder shrinkage", shrinkage, [1, 1, h / 16, w / 16]),
            ("uncert uncert_prob", uncertainty, [1, 1, h / 16, w / 16]),
        ]
        for (port, tensor, wanted) in exact where tensor.shape != wanted {
            throw EngineError.modelInvalid(path: manifestPath, detail: "\(port) has shape \(tensor.shape) at this size, "
                                           + "the engine needs \(wanted). Re-export the model set.")
        }
        let sameCount: [[Tensor]] = [
            [key, selection], [lastAlpha, decodedAlpha], [pixFeat, lastPixFeat], [objectMemory, objectSummary],
            [sensory, decodedSensory, memoryFrameSensory],
            [lastMaskValue, bankReadout, memoryValueDifference, blendedReadout, objectReadout],
        ]
        for group in sameCount where Set(group.map(\.count)).count > 1 {
            throw EngineError.modelInvalid(path: manifestPath, detail: "tensors the engine combines element-wise have "
                                           + "different shapes: \(group.map(\.shape)). Re-export the model set.")
        }
        for tensor in [key, lastMaskValue] where tensor.shape.count != 4 {
            throw EngineError.modelInvalid(path: manifestPath, detail: "key and value tensors must be 4-D, not \(tensor.shape)")
        }
    }
}

/// The seven model calls of the step schedule, each bound once to its tensors.
private struct Calls {
    let encode, estimateUncertainty, readoutFromMemory, readoutFirstFrame, decode, encodeMask, memorizeFrame: Binding
    var all: [Binding] { [encode, estimateUncertainty, readoutFromMemory, readoutFirstFrame, decode, encodeMask, memorizeFrame] }

    init(sessions: [String: Session], _ t: Tensors) throws {
        func bind(_ model: MatAnyone2Core.Model, _ inputs: [String: Tensor], _ outputs: [String: Tensor]) throws -> Binding {
            try sessions[model.rawValue]!.bind(inputs: inputs, outputs: outputs)
        }
        encode = try bind(.encoder, ["image": t.image],
                          ["f8": t.f8, "f4": t.f4, "f2": t.f2, "f1": t.f1, "pix_feat": t.pixFeat, "key": t.key,
                           "shrinkage": t.shrinkage, "selection": t.selection])
        estimateUncertainty = try bind(.uncert, ["last_pix_feat": t.lastPixFeat, "pix_feat": t.pixFeat, "last_mask": t.lastAlpha,
                                                 "mem_val_diff": t.memoryValueDifference], ["uncert_prob": t.uncertainty])
        readoutFromMemory = try bind(.readout, ["pix_feat": t.pixFeat, "visual_readout": t.blendedReadout, "sensory": t.sensory,
                                                "last_mask": t.lastAlpha, "obj_memory": t.objectMemory], ["mem_readout": t.objectReadout])
        // First-frame passes read no memory: the pixel-memory input is the last mask value itself.
        readoutFirstFrame = try bind(.readout, ["pix_feat": t.pixFeat, "visual_readout": t.lastMaskValue, "sensory": t.sensory,
                                                "last_mask": t.lastAlpha, "obj_memory": t.objectMemory], ["mem_readout": t.objectReadout])
        decode = try bind(.decoder, ["f8": t.f8, "f4": t.f4, "f2": t.f2, "f1": t.f1, "mem_readout": t.objectReadout,
                                     "sensory": t.sensory], ["alpha": t.decodedAlpha, "sensory_out": t.decodedSensory])
        encodeMask = try bind(.maskencoder, ["f1": t.f1, "pix_feat": t.pixFeat, "mask": t.lastAlpha], ["mask_value": t.lastMaskValue])
        memorizeFrame = try bind(.memframe, ["mask_value": t.lastMaskValue, "sensory": t.sensory, "mask": t.lastAlpha],
                                 ["sensory_out": t.memoryFrameSensory, "obj_summary": t.objectSummary])
    }
}

/// Where a core keeps its state between models and does the glue's own arithmetic.
private enum Glue {
    /// Host memory: Swift loops, the memory read with BLAS.
    case host(MemoryBank)
    /// The provider's memory: built-in graphs (DeviceGraphs) run by the models' provider.
    case device(DeviceGlue)

    var memoryFrames: Int {
        switch self {
        case let .host(bank): return bank.frames
        case let .device(device): return device.bank.frames
        }
    }

    func clearBank() {
        switch self {
        case let .host(bank): bank.clear()
        case let .device(device): device.bank.clear()
        }
    }
}

/// A core's device-side extras: its memory bank, and the few host tensors that cross the bus.
private final class DeviceGlue {
    let graphs: DeviceGraphs
    let bank: DeviceMemoryBank
    /// The alpha in host memory: each frame's comes down here; a seed goes up from here.
    let alphaDownloaded: Tensor
    /// The watch's look at the uncertainty (every watch-interval frames).
    let uncertaintyDownloaded: Tensor
    /// Host zeros that reset the sensory state at a seed.
    let zeroSensory: Tensor
    /// The object memory's running sum, on the device.
    let objectMemorySum: Tensor

    init(graphs: DeviceGraphs, session: Session, runtime: OnnxRuntime, alphaShape: [Int], sensoryShape: [Int],
         objectMemoryShape: [Int], uncertaintyShape: [Int], tokens: Int, maxFrames: Int) throws {
        self.graphs = graphs
        bank = try DeviceMemoryBank(keyDim: graphs.read.keyDim, valueDim: graphs.read.valueDim, tokensPerFrame: tokens,
                                    maxFrames: maxFrames, graphs: graphs, session: session)
        alphaDownloaded = try Tensor(runtime: runtime, shape: alphaShape, name: "alpha (host)")
        uncertaintyDownloaded = try Tensor(runtime: runtime, shape: uncertaintyShape, name: "uncertainty (host)")
        zeroSensory = try Tensor(runtime: runtime, shape: sensoryShape, name: "zero sensory (host)")
        objectMemorySum = try Tensor(onDeviceOf: session, shape: objectMemoryShape, name: "object memory sum")
    }
}
