import Foundation

/// MatAnyone2's working memory for one object in the provider's memory: the same token-major rows and
/// frame order as `MemoryBank` (the permanent frame, then temporary frames oldest → newest), written
/// and read by graphs (`DeviceGraphs`), never by Swift. On a GPU the bank — up to ~60 MB a frame's
/// read at 1920×1088 — never crosses the bus.
final class DeviceMemoryBank {
    let keyDim: Int
    let valueDim: Int
    let tokensPerFrame: Int
    let maxFrames: Int
    private(set) var frames = 0

    private let keys: Tensor        // [maxFrames·HW, CK]
    private let shrinkage: Tensor   // [maxFrames·HW]
    private let values: Tensor      // [maxFrames·HW, CV]
    /// Where the rows of the frames that stay pass through when the oldest temporary frame goes: a
    /// copy between overlapping ranges of one buffer is undefined on a GPU. nil when at most two
    /// frames are kept (nothing ever moves).
    private let moving: (keys: Tensor, shrinkage: Tensor, values: Tensor)?
    private let graphs: DeviceGraphs

    init(keyDim: Int, valueDim: Int, tokensPerFrame: Int, maxFrames: Int, graphs: DeviceGraphs, session: Session) throws {
        guard let rows = checkedProduct([maxFrames, tokensPerFrame]), maxFrames >= 1 else {
            throw EngineError.badSettings(detail: "a memory bank of \(maxFrames) frames × \(tokensPerFrame) tokens does not fit in memory")
        }
        self.keyDim = keyDim
        self.valueDim = valueDim
        self.tokensPerFrame = tokensPerFrame
        self.maxFrames = maxFrames
        self.graphs = graphs
        keys = try Tensor(onDeviceOf: session, shape: [rows, keyDim], name: "memory keys")
        shrinkage = try Tensor(onDeviceOf: session, shape: [rows], name: "memory shrinkage")
        values = try Tensor(onDeviceOf: session, shape: [rows, valueDim], name: "memory values")
        if maxFrames > 2 {
            let kept = (maxFrames - 2) * tokensPerFrame
            moving = (try Tensor(onDeviceOf: session, shape: [kept, keyDim], name: "memory keys (moving)"),
                      try Tensor(onDeviceOf: session, shape: [kept], name: "memory shrinkage (moving)"),
                      try Tensor(onDeviceOf: session, shape: [kept, valueDim], name: "memory values (moving)"))
        } else {
            moving = nil
        }
    }

    func clear() { frames = 0 }

    /// Adds a frame: `key` [1, CK, h, w] and `value` [1, CV, h, w] channel-major as the models give
    /// them, `frameShrinkage` [1, 1, h, w]. The first frame of an empty bank is permanent; past
    /// `maxFrames` the oldest temporary frame goes.
    func add(key: Tensor, shrinkage frameShrinkage: Tensor, value: Tensor) throws {
        let hw = tokensPerFrame
        frames = try MemoryBank.makeRoom(frames: frames, maxFrames: maxFrames, tokensPerFrame: hw) { rows in
            // By way of `moving`: no copy between overlapping ranges.
            if rows > 0, let moving {
                let stay = try rowViews(from: 2 * hw, count: rows)
                let staging = [try moving.keys.view(shape: [rows, keyDim]), try moving.shrinkage.view(shape: [rows]),
                               try moving.values.view(shape: [rows, valueDim])]
                let destination = try rowViews(from: hw, count: rows)
                // The views own the OrtValues the runs take: they must live until the runs are over.
                try withExtendedLifetime((stay, staging, destination)) {
                    try graphs.copy(zip(stay.map(\.value), staging.map(\.value)).map { (from: $0, to: $1) })
                    try graphs.copy(zip(staging.map(\.value), destination.map(\.value)).map { (from: $0, to: $1) })
                }
            }
        }
        let rows = try rowViews(from: frames * hw, count: hw)
        let frame = [try key.view(shape: [keyDim, hw]), try frameShrinkage.view(shape: [hw]), try value.view(shape: [valueDim, hw])]
        try withExtendedLifetime((rows, frame)) {
            try graphs.append(key: frame[0].value, shrinkage: frame[1].value, value: frame[2].value,
                              keyRows: rows[0].value, shrinkageRows: rows[1].value, valueRows: rows[2].value)
        }
        frames += 1
    }

    /// Reads memory for the query frame (see `MemoryReadoutGraph.read`); all tensors [1, C, h, w].
    func read(queryKey: Tensor, selection: Tensor, lastValue: Tensor, topK: Int, readout: Tensor, difference: Tensor) throws {
        precondition(frames > 0)
        let hw = tokensPerFrame
        let memory = try rowViews(from: 0, count: frames * hw)
        let query = try queryKey.view(shape: [keyDim, hw]), chosen = try selection.view(shape: [keyDim, hw])
        let last = try lastValue.view(shape: [valueDim, hw])
        let out = try readout.view(shape: [valueDim, hw]), change = try difference.view(shape: [valueDim, hw])
        try withExtendedLifetime((memory, query, chosen, last, out, change)) {
            try graphs.read.read(queryKey: query.value, selection: chosen.value, memoryKeys: memory[0].value,
                                 memoryShrinkage: memory[1].value, memoryValues: memory[2].value, memoryTokens: frames * hw,
                                 lastValue: last.value, topK: topK, readout: out.value, difference: change.value)
        }
    }

    /// Views of rows first..<first + count of the keys, shrinkage and values.
    private func rowViews(from first: Int, count: Int) throws -> [OrtValueView] {
        [try keys.view(offset: first * keyDim, shape: [count, keyDim]), try shrinkage.view(offset: first, shape: [count]),
         try values.view(offset: first * valueDim, shape: [count, valueDim])]
    }
}
