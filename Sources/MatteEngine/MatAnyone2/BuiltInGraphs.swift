import Foundation

/// Small ONNX graphs the engine writes itself (no file to ship or keep in step with the model set),
/// so that the glue's own arithmetic runs where the models run.
struct GraphWriter {
    private var graph = ProtoWriter()
    private var inputs: [[UInt8]] = []
    private var outputs: [[UInt8]] = []

    static let float = 1, int64 = 7

    init(name: String) { graph.string(2, name) }

    /// A node; `ints` are INT attributes, except `perm` (INTS).
    mutating func node(_ op: String, _ inputs: [String], _ outputs: [String], ints: [(String, [Int])] = []) {
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
        graph.message(1, node.bytes)
    }

    /// A float scalar initializer.
    mutating func constant(_ name: String, _ value: Float) {
        var tensor = ProtoWriter()
        tensor.varint(2, 1)                   // FLOAT, a scalar (no dims)
        tensor.string(8, name)
        tensor.bytes(9, withUnsafeBytes(of: value.bitPattern.littleEndian) { Array($0) })
        graph.message(5, tensor.bytes)
    }

    /// A 1-D int64 initializer.
    mutating func constant(_ name: String, _ values: [Int]) {
        var tensor = ProtoWriter()
        tensor.varint(1, UInt64(values.count))
        tensor.varint(2, 7)                   // INT64
        tensor.string(8, name)
        tensor.bytes(9, values.flatMap { value in withUnsafeBytes(of: Int64(value).littleEndian) { Array($0) } })
        graph.message(5, tensor.bytes)
    }

    /// A graph input; `dims` nil: any shape (numeric dims are fixed, others named and dynamic).
    mutating func input(_ name: String, _ elementType: Int = float, _ dims: [String]? = nil) {
        inputs.append(GraphWriter.valueInfo(name, elementType, dims))
    }

    mutating func output(_ name: String, _ elementType: Int = float, _ dims: [String]? = nil) {
        outputs.append(GraphWriter.valueInfo(name, elementType, dims))
    }

    /// The model: IR version 8, opset 18.
    func model() -> [UInt8] {
        var graph = self.graph
        inputs.forEach { graph.message(11, $0) }
        outputs.forEach { graph.message(12, $0) }
        var opset = ProtoWriter()
        opset.string(1, "")
        opset.varint(2, 18)
        var model = ProtoWriter()
        model.varint(1, 8)
        model.string(2, "gst-matanyone")
        model.message(8, opset.bytes)
        model.message(7, graph.bytes)
        return model.bytes
    }

    private static func valueInfo(_ name: String, _ elementType: Int, _ dims: [String]?) -> [UInt8] {
        var tensorType = ProtoWriter()
        tensorType.varint(1, UInt64(elementType))
        if let dims {
            var shape = ProtoWriter()
            for dim in dims {
                var dimension = ProtoWriter()
                if let size = Int(dim) { dimension.varint(1, UInt64(size)) } else { dimension.string(2, dim) }
                shape.message(1, dimension.bytes)
            }
            tensorType.message(2, shape.bytes)
        }
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

/// The glue's element-wise steps as graphs run by the models' provider, on tensors that live in its
/// memory: copies (also up from and down to host memory, which the runtime moves across the bus),
/// the uncertainty blend, the object-memory sum, and writing a frame into the memory bank. With
/// these and the memory read (`MemoryReadoutGraph`), Swift touches only the frame and the alpha.
final class DeviceGraphs {
    let read: MemoryReadoutGraph
    /// `copies[n - 1]` copies n tensors at once (any shapes; each output the same as its input).
    private let copies: [Session]
    /// visual = readout·p + last·(1 − p), p broadcast over the channels.
    private let blend: Session
    /// sum = a + b.
    private let add: Session
    /// A frame's key [CK, HW], shrinkage [HW] and value [CV, HW] → bank rows [HW, CK], [HW], [HW, CV].
    private let append: Session

    static let copyArity = 4
    /// Bytes the glue's copies moved between host and device memory (the alpha down, a seed up;
    /// the watch's uncertainty down). The frame goes up with the encoder's run, not here.
    private(set) var bytesAcrossTheBus = 0

    init(runtime: OnnxRuntime, keyDim: Int, valueDim: Int, config: SessionConfig) throws {
        read = try MemoryReadoutGraph(runtime: runtime, keyDim: keyDim, valueDim: valueDim, config: config)
        func session(_ name: String, _ build: (inout GraphWriter) -> Void) throws -> Session {
            var writer = GraphWriter(name: name)
            build(&writer)
            return try Session(runtime: runtime, name: name, path: "(\(name) graph, built in)", model: writer.model(), config: config)
        }
        copies = try (1...DeviceGraphs.copyArity).map { arity in
            try session("copy-\(arity)") { graph in
                for index in 0..<arity {
                    graph.input("x\(index)")
                    graph.output("y\(index)")
                    graph.node("Identity", ["x\(index)"], ["y\(index)"])
                }
            }
        }
        blend = try session("uncertainty-blend") { graph in
            graph.constant("one", 1)
            graph.node("Mul", ["readout", "p"], ["from_memory"])
            graph.node("Sub", ["one", "p"], ["q"])
            graph.node("Mul", ["last", "q"], ["from_last"])
            graph.node("Add", ["from_memory", "from_last"], ["visual"])
            ["readout", "last", "p"].forEach { graph.input($0) }
            graph.output("visual")
        }
        add = try session("sum") { graph in
            graph.node("Add", ["a", "b"], ["sum"])
            graph.input("a")
            graph.input("b")
            graph.output("sum")
        }
        append = try session("memory-append") { graph in
            graph.node("Transpose", ["key"], ["key_rows"], ints: [("perm", [1, 0])])
            graph.node("Identity", ["shrinkage"], ["shrinkage_rows"])
            graph.node("Transpose", ["value"], ["value_rows"], ints: [("perm", [1, 0])])
            graph.input("key", GraphWriter.float, ["\(keyDim)", "HW"])
            graph.input("shrinkage", GraphWriter.float, ["HW"])
            graph.input("value", GraphWriter.float, ["\(valueDim)", "HW"])
            graph.output("key_rows", GraphWriter.float, ["HW", "\(keyDim)"])
            graph.output("shrinkage_rows", GraphWriter.float, ["HW"])
            graph.output("value_rows", GraphWriter.float, ["HW", "\(valueDim)"])
        }
    }

    /// Copies each pair's source into its destination (equal shapes), in as few runs as possible.
    func copy(_ pairs: [(from: OpaquePointer, to: OpaquePointer)]) throws {
        var rest = pairs[...]
        while !rest.isEmpty {
            let batch = rest.prefix(DeviceGraphs.copyArity)
            rest = rest.dropFirst(batch.count)
            let names = batch.indices.map { $0 - batch.startIndex }
            try copies[batch.count - 1].run(inputs: zip(names.map { "x\($0)" }, batch.map(\.from)),
                                            outputs: Array(zip(names.map { "y\($0)" }, batch.map(\.to))))
        }
    }

    func copy(_ pairs: [(from: Tensor, to: Tensor)]) throws {
        for (from, to) in pairs {
            precondition(from.shape == to.shape, "copy between shapes \(from.shape) and \(to.shape)")
            if from.isOnDevice != to.isOnDevice { bytesAcrossTheBus += from.count * MemoryLayout<Float>.size }
        }
        try copy(pairs.map { (from: $0.from.value, to: $0.to.value) })
    }

    func blend(readout: Tensor, last: Tensor, uncertainty: Tensor, into visual: Tensor) throws {
        try blend.run(inputs: [("readout", readout.value), ("last", last.value), ("p", uncertainty.value)],
                      outputs: [("visual", visual.value)])
    }

    func add(_ a: Tensor, _ b: Tensor, into sum: Tensor) throws {
        try add.run(inputs: [("a", a.value), ("b", b.value)], outputs: [("sum", sum.value)])
    }

    func append(key: OpaquePointer, shrinkage: OpaquePointer, value: OpaquePointer,
                keyRows: OpaquePointer, shrinkageRows: OpaquePointer, valueRows: OpaquePointer) throws {
        try append.run(inputs: [("key", key), ("shrinkage", shrinkage), ("value", value)],
                       outputs: [("key_rows", keyRows), ("shrinkage_rows", shrinkageRows), ("value_rows", valueRows)])
    }
}
