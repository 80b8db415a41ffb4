import Foundation

/// The memory read (`MemoryBank.read`: anisotropic-L2 similarity with shrinkage and selection, top-k,
/// softmax, weighted sum of values) as a small ONNX graph, so that on a GPU provider it runs where
/// the models run: at a 1920×1088 working size the similarity alone is 8160 × 40800 × 64 × 2
/// multiply-adds a frame, far too much for CPU BLAS. Built here for the set's key and value widths
/// (no file to ship or keep in step), and run by the same provider as the models.
///
///   inputs   query_key, selection [CK, HW]; mem_key [N, CK]; mem_shrinkage [N]; mem_value [N, CV];
///            k [1] (int64); last_value [CV, HW]
///   outputs  readout [CV, HW]; difference = readout − last_value (the uncertainty model's input)
///
/// Same arithmetic as the Swift read: S = (2·(qk⊙sel)ᵀ·mkᵀ − selᵀ·(mk²)ᵀ − Σc sel·qk²) · shrink / √CK,
/// top-k along the memory, softmax (max-subtracted, as ONNX defines it), readout = Σ weights · values.
final class MemoryReadoutGraph {
    let session: Session
    let keyDim: Int
    let valueDim: Int
    /// The graph's `k` input lives here (an OrtValue needs storage that outlives it).
    private let topKStorage = UnsafeMutablePointer<Int64>.allocate(capacity: 1)

    deinit { topKStorage.deallocate() }

    init(runtime: OnnxRuntime, keyDim: Int, valueDim: Int, config: SessionConfig) throws {
        self.keyDim = keyDim
        self.valueDim = valueDim
        let model = MemoryReadoutGraph.model(keyDim: keyDim, valueDim: valueDim)
        session = try Session(runtime: runtime, name: "memory-readout", path: "(memory readout graph, built in)",
                              model: model, config: config)
    }

    /// One read. `memoryKeys` [N, CK], `memoryShrinkage` [N], `memoryValues` [N, CV] are the bank's
    /// first N rows (token-major, as both banks store them); `queryKey`, `selection` [CK, HW];
    /// `lastValue`, `readout`, `difference` [CV, HW]: the readout and readout − last value (the
    /// uncertainty model's input). Values may live in host or device memory.
    func read(queryKey: OpaquePointer, selection: OpaquePointer, memoryKeys: OpaquePointer, memoryShrinkage: OpaquePointer,
              memoryValues: OpaquePointer, memoryTokens: Int, lastValue: OpaquePointer, topK: Int,
              readout: OpaquePointer, difference: OpaquePointer) throws {
        precondition(memoryTokens > 0)
        topKStorage.pointee = Int64(min(topK, memoryTokens))
        let k = try OrtValueView(runtime: session.runtime, int64s: topKStorage, shape: [1])
        try withExtendedLifetime(k) {
            try session.run(inputs: [("query_key", queryKey), ("selection", selection), ("mem_key", memoryKeys),
                                     ("mem_shrinkage", memoryShrinkage), ("mem_value", memoryValues), ("k", k.value),
                                     ("last_value", lastValue)],
                            outputs: [("readout", readout), ("difference", difference)])
        }
    }

    // MARK: - The graph

    static func model(keyDim: Int, valueDim: Int) -> [UInt8] {
        var graph = GraphWriter(name: "memory_readout")
        let perm = [("perm", [1, 0])]
        graph.node("Mul", ["query_key", "selection"], ["weighted_query"])                       // qk⊙sel [CK, HW]
        graph.node("Mul", ["weighted_query", "query_key"], ["query_terms"])
        graph.node("ReduceSum", ["query_terms", "axis0"], ["query_squared_row"], ints: [("keepdims", [1])])  // [1, HW]
        graph.node("Transpose", ["query_squared_row"], ["query_squared"], ints: perm)            // [HW, 1]
        graph.node("Transpose", ["selection"], ["selection_t"], ints: perm)                      // [HW, CK]
        graph.node("Transpose", ["weighted_query"], ["weighted_query_t"], ints: perm)
        graph.node("Mul", ["mem_key", "mem_key"], ["mem_key_squared"])                          // [N, CK]
        graph.node("Transpose", ["mem_key_squared"], ["mem_key_squared_t"], ints: perm)
        graph.node("Transpose", ["mem_key"], ["mem_key_t"], ints: perm)                         // [CK, N]
        graph.node("MatMul", ["selection_t", "mem_key_squared_t"], ["selection_term"])          // [HW, N]
        graph.node("MatMul", ["weighted_query_t", "mem_key_t"], ["cross_term"])
        graph.node("Mul", ["cross_term", "two"], ["cross_term_2"])
        graph.node("Sub", ["cross_term_2", "selection_term"], ["partial"])
        graph.node("Sub", ["partial", "query_squared"], ["distance"])
        graph.node("Mul", ["distance", "mem_shrinkage"], ["shrunk"])
        graph.node("Mul", ["shrunk", "scale"], ["similarity"])
        graph.node("TopK", ["similarity", "k"], ["top_values", "top_indices"], ints: [("axis", [1]), ("largest", [1]), ("sorted", [1])])
        graph.node("Softmax", ["top_values"], ["weights"], ints: [("axis", [1])])               // [HW, k]
        graph.node("Gather", ["mem_value", "top_indices"], ["chosen_values"], ints: [("axis", [0])])  // [HW, k, CV]
        graph.node("Unsqueeze", ["weights", "axis1"], ["weights_row"])                          // [HW, 1, k]
        graph.node("MatMul", ["weights_row", "chosen_values"], ["weighted_row"])                // [HW, 1, CV]
        graph.node("Squeeze", ["weighted_row", "axis1"], ["weighted"])                          // [HW, CV]
        graph.node("Transpose", ["weighted"], ["readout"], ints: perm)                          // [CV, HW]
        graph.node("Sub", ["readout", "last_value"], ["difference"])
        graph.constant("two", 2)
        graph.constant("scale", 1 / Float(keyDim).squareRoot())
        graph.constant("axis0", [0])
        graph.constant("axis1", [1])
        let float = GraphWriter.float
        graph.input("query_key", float, ["\(keyDim)", "HW"])
        graph.input("selection", float, ["\(keyDim)", "HW"])
        graph.input("mem_key", float, ["N", "\(keyDim)"])
        graph.input("mem_shrinkage", float, ["N"])
        graph.input("mem_value", float, ["N", "\(valueDim)"])
        graph.input("k", GraphWriter.int64, ["1"])
        graph.input("last_value", float, ["\(valueDim)", "HW"])
        graph.output("readout", float, ["\(valueDim)", "HW"])
        graph.output("difference", float, ["\(valueDim)", "HW"])
        return graph.model()
    }
}
