import Foundation

/// The memory read (`MemoryBank.read`: anisotropic-L2 similarity with shrinkage and selection, top-k,
/// softmax, weighted sum of values) as a small ONNX graph, so that on a GPU provider it runs where
/// the models run: at a 1920×1088 working size the similarity alone is 8160 × 40800 × 64 × 2
/// multiply-adds a frame, far too much for CPU BLAS. Built here for the set's key and value widths
/// (no file to ship or keep in step), and run by the same provider as the models.
///
///   inputs   query_key, selection [CK, HW]; mem_key [N, CK]; mem_shrinkage [N]; mem_value [N, CV];
///            k [1] (int64)
///   output   readout [CV, HW]
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

    /// Reads `bank` for the query frame into `readout` [CV, HW] (the bank's layout, token-major, is
    /// the graph's: its storage is passed as it is, no copy on the CPU side).
    func read(bank: MemoryBank, queryKey: UnsafeMutablePointer<Float>, selection: UnsafeMutablePointer<Float>,
              topK: Int, into readout: UnsafeMutablePointer<Float>) throws {
        precondition(bank.frames > 0)
        let hw = bank.tokensPerFrame, n = bank.frames * hw
        topKStorage.pointee = Int64(min(topK, n))
        let runtime = session.runtime
        let views = [
            try OrtValueView(runtime: runtime, floats: queryKey, shape: [keyDim, hw]),
            try OrtValueView(runtime: runtime, floats: selection, shape: [keyDim, hw]),
            try OrtValueView(runtime: runtime, floats: bank.keyRows, shape: [n, keyDim]),
            try OrtValueView(runtime: runtime, floats: bank.shrinkageRows, shape: [n]),
            try OrtValueView(runtime: runtime, floats: bank.valueRows, shape: [n, valueDim]),
            try OrtValueView(runtime: runtime, int64s: topKStorage, shape: [1]),
        ]
        let output = try OrtValueView(runtime: runtime, floats: readout, shape: [valueDim, hw])
        // The views own the OrtValues: they must live until the run is over.
        try withExtendedLifetime((views, output)) {
            try session.run(inputs: zip(["query_key", "selection", "mem_key", "mem_shrinkage", "mem_value", "k"], views.map(\.value)),
                            outputs: [("readout", output.value)])
        }
    }

    // MARK: - The graph, written as ONNX protobuf

    static func model(keyDim: Int, valueDim: Int) -> [UInt8] {
        var graph = ProtoWriter()
        let scale = 1 / Float(keyDim).squareRoot()
        let nodes: [[UInt8]] = [
            node("Mul", ["query_key", "selection"], ["weighted_query"]),                       // qk⊙sel [CK, HW]
            node("Mul", ["weighted_query", "query_key"], ["query_terms"]),
            node("ReduceSum", ["query_terms", "axis0"], ["query_squared_row"], ints: [("keepdims", [1])]),  // [1, HW]
            node("Transpose", ["query_squared_row"], ["query_squared"], ints: [("perm", [1, 0])]),         // [HW, 1]
            node("Transpose", ["selection"], ["selection_t"], ints: [("perm", [1, 0])]),                    // [HW, CK]
            node("Transpose", ["weighted_query"], ["weighted_query_t"], ints: [("perm", [1, 0])]),
            node("Mul", ["mem_key", "mem_key"], ["mem_key_squared"]),                          // [N, CK]
            node("Transpose", ["mem_key_squared"], ["mem_key_squared_t"], ints: [("perm", [1, 0])]),
            node("Transpose", ["mem_key"], ["mem_key_t"], ints: [("perm", [1, 0])]),           // [CK, N]
            node("MatMul", ["selection_t", "mem_key_squared_t"], ["selection_term"]),          // [HW, N]
            node("MatMul", ["weighted_query_t", "mem_key_t"], ["cross_term"]),
            node("Mul", ["cross_term", "two"], ["cross_term_2"]),
            node("Sub", ["cross_term_2", "selection_term"], ["partial"]),
            node("Sub", ["partial", "query_squared"], ["distance"]),
            node("Mul", ["distance", "mem_shrinkage"], ["shrunk"]),
            node("Mul", ["shrunk", "scale"], ["similarity"]),
            node("TopK", ["similarity", "k"], ["top_values", "top_indices"], ints: [("axis", [1]), ("largest", [1]), ("sorted", [1])]),
            node("Softmax", ["top_values"], ["weights"], ints: [("axis", [1])]),               // [HW, k]
            node("Gather", ["mem_value", "top_indices"], ["chosen_values"], ints: [("axis", [0])]),  // [HW, k, CV]
            node("Unsqueeze", ["weights", "axis1"], ["weights_row"]),                          // [HW, 1, k]
            node("MatMul", ["weights_row", "chosen_values"], ["weighted_row"]),                // [HW, 1, CV]
            node("Squeeze", ["weighted_row", "axis1"], ["weighted"]),                          // [HW, CV]
            node("Transpose", ["weighted"], ["readout"], ints: [("perm", [1, 0])]),            // [CV, HW]
        ]
        for node in nodes { graph.message(1, node) }
        graph.string(2, "memory_readout")
        graph.message(5, floatConstant("two", 2))
        graph.message(5, floatConstant("scale", scale))
        graph.message(5, int64Constant("axis0", [0]))
        graph.message(5, int64Constant("axis1", [1]))
        let float = 1, int64 = 7
        for (name, type, dims) in [("query_key", float, ["\(keyDim)", "HW"]), ("selection", float, ["\(keyDim)", "HW"]),
                                   ("mem_key", float, ["N", "\(keyDim)"]), ("mem_shrinkage", float, ["N"]),
                                   ("mem_value", float, ["N", "\(valueDim)"]), ("k", int64, ["1"])] {
            graph.message(11, valueInfo(name, type, dims))
        }
        graph.message(12, valueInfo("readout", float, ["\(valueDim)", "HW"]))
        var opset = ProtoWriter()
        opset.string(1, "")
        opset.varint(2, 18)
        var model = ProtoWriter()
        model.varint(1, 8)                    // IR version 8 (opset 18)
        model.string(2, "gst-matanyone")
        model.message(8, opset.bytes)
        model.message(7, graph.bytes)
        return model.bytes
    }

    private static func node(_ op: String, _ inputs: [String], _ outputs: [String], ints: [(String, [Int])] = []) -> [UInt8] {
        var node = ProtoWriter()
        inputs.forEach { node.string(1, $0) }
        outputs.forEach { node.string(2, $0) }
        node.string(3, outputs[0])
        node.string(4, op)
        for (name, values) in ints {
            var attribute = ProtoWriter()
            attribute.string(1, name)
            if name == "perm" {
                values.forEach { attribute.varint(8, UInt64(bitPattern: Int64($0))) }
                attribute.varint(20, 7)       // INTS
            } else {
                attribute.varint(3, UInt64(bitPattern: Int64(values[0])))
                attribute.varint(20, 2)       // INT
            }
            node.message(5, attribute.bytes)
        }
        return node.bytes
    }

    private static func floatConstant(_ name: String, _ value: Float) -> [UInt8] {
        var tensor = ProtoWriter()
        tensor.varint(2, 1)                   // FLOAT, a scalar (no dims)
        tensor.string(8, name)
        tensor.bytes(9, withUnsafeBytes(of: value.bitPattern.littleEndian) { Array($0) })
        return tensor.bytes
    }

    private static func int64Constant(_ name: String, _ values: [Int]) -> [UInt8] {
        var tensor = ProtoWriter()
        tensor.varint(1, UInt64(values.count))
        tensor.varint(2, 7)                   // INT64
        tensor.string(8, name)
        tensor.bytes(9, values.flatMap { value in withUnsafeBytes(of: Int64(value).littleEndian) { Array($0) } })
        return tensor.bytes
    }

    /// A tensor value description; numeric dims are fixed, others named (dynamic).
    private static func valueInfo(_ name: String, _ elementType: Int, _ dims: [String]) -> [UInt8] {
        var shape = ProtoWriter()
        for dim in dims {
            var dimension = ProtoWriter()
            if let size = Int(dim) { dimension.varint(1, UInt64(size)) } else { dimension.string(2, dim) }
            shape.message(1, dimension.bytes)
        }
        var tensorType = ProtoWriter()
        tensorType.varint(1, UInt64(elementType))
        tensorType.message(2, shape.bytes)
        var type = ProtoWriter()
        type.message(1, tensorType.bytes)
        var info = ProtoWriter()
        info.string(1, name)
        info.message(2, type.bytes)
        return info.bytes
    }
}

/// Just enough protobuf encoding for an ONNX model: varint and length-delimited fields.
struct ProtoWriter {
    private(set) var bytes: [UInt8] = []

    private mutating func raw(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(value & 0x7f) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    mutating func varint(_ field: Int, _ value: UInt64) {
        raw(UInt64(field) << 3)
        raw(value)
    }

    mutating func bytes(_ field: Int, _ payload: [UInt8]) {
        raw(UInt64(field) << 3 | 2)
        raw(UInt64(payload.count))
        bytes += payload
    }

    mutating func string(_ field: Int, _ text: String) { bytes(field, Array(text.utf8)) }
    mutating func message(_ field: Int, _ payload: [UInt8]) { bytes(field, payload) }
}
