import Foundation

/// The KServe v2 (Open Inference) protocol over HTTP/REST with its binary-tensor extension, as
/// Triton, OpenVINO Model Server and KServe speak it: a JSON header (Foundation's JSONSerialization)
/// followed by the tensors' raw bytes, its length in `Inference-Header-Content-Length`. Tensors may
/// instead lie in a system shared memory region the server has registered (Triton's extension).
enum KServe {
    /// Bytes per element of the datatypes this client sends or reads.
    static func elementSize(_ datatype: String) -> Int? {
        switch datatype {
        case "BOOL", "UINT8", "INT8": return 1
        case "FP16", "UINT16", "INT16": return 2
        case "FP32", "UINT32", "INT32": return 4
        case "FP64", "UINT64", "INT64": return 8
        default: return nil
        }
    }

    /// Where a tensor's bytes are.
    enum Placement {
        /// In the request or reply body, after the JSON header.
        case body
        /// In a registered system shared memory region.
        case sharedMemory(region: String, offset: Int, size: Int)

        var parameters: [String: Any] {
            switch self {
            case .body: return [:]
            case let .sharedMemory(region, offset, size):
                return ["shared_memory_region": region, "shared_memory_offset": offset, "shared_memory_byte_size": size]
            }
        }
    }

    /// One input of a request; with `.body` its bytes are `bytes`.
    struct Input {
        let name: String
        let datatype: String
        let shape: [Int]
        var placement = Placement.body
        var bytes = UnsafeRawBufferPointer(start: nil, count: 0)
    }

    /// One output asked for, in the body (binary) or in shared memory.
    struct Output {
        let name: String
        var placement = Placement.body
    }

    /// A request's JSON header; the body follows it with the `.body` inputs' bytes in order.
    static func requestHeader(parameters: [String: Any], inputs: [Input], outputs: [Output]) throws -> [UInt8] {
        let header: [String: Any] = [
            "parameters": parameters,
            "inputs": inputs.map { input -> [String: Any] in
                var parameters = input.placement.parameters
                if case .body = input.placement { parameters["binary_data_size"] = input.bytes.count }
                return ["name": input.name, "datatype": input.datatype, "shape": input.shape, "parameters": parameters]
            },
            "outputs": outputs.map { output -> [String: Any] in
                var parameters = output.placement.parameters
                if case .body = output.placement { parameters["binary_data"] = true }
                return ["name": output.name, "parameters": parameters]
            },
        ]
        return Array(try JSONSerialization.data(withJSONObject: header))
    }

    /// An output of a reply: its type and shape, and where its bytes are in the reply body (nil when
    /// in shared memory).
    struct Tensor {
        let datatype: String
        let shape: [Int]
        let bytes: Range<Int>?
        let count: Int
    }

    /// The largest JSON header a reply may have (the replies this client asks for carry a few hundred bytes).
    static let headerLimit = 1 << 20

    /// Reads a 200 reply: its outputs by name (`sharedMemoryOutputs`: those asked for in shared memory).
    /// Anything malformed (JSON, types, shapes, sizes that do
    /// not add up to the body) is an error naming what.
    static func parseReply(_ reply: HTTPReply, sharedMemoryOutputs: Set<String> = []) throws -> [String: Tensor] {
        let body = reply.body
        let headerLength: Int
        if let announced = reply.headers["inference-header-content-length"] {
            guard let length = Int(announced), length >= 0, length <= min(body.count, headerLimit) else {
                throw MalformedReply("Inference-Header-Content-Length \(announced) does not fit a \(body.count)-byte body")
            }
            headerLength = length
        } else {
            guard body.count <= headerLimit else { throw MalformedReply("a \(body.count)-byte reply without a binary header length") }
            headerLength = body.count
        }
        let json: Any
        do {
            json = try JSONSerialization.jsonObject(with: Data(body[0..<headerLength]))
        } catch {
            throw MalformedReply("its header is not JSON")
        }
        guard let object = json as? [String: Any], let outputs = object["outputs"] as? [[String: Any]] else {
            throw MalformedReply("its header has no outputs")
        }
        var tensors: [String: Tensor] = [:]
        var next = headerLength
        for output in outputs {
            guard let name = output["name"] as? String, let datatype = output["datatype"] as? String,
                  let size = elementSize(datatype), let shape = output["shape"] as? [Int], shape.allSatisfy({ $0 >= 0 }),
                  let count = checkedProduct(shape), let bytes = checkedProduct([count, size]) else {
                throw MalformedReply("an output without a name, a known datatype or a valid shape")
            }
            guard tensors[name] == nil else { throw MalformedReply("output \(name) appears twice") }
            let parameters = output["parameters"] as? [String: Any] ?? [:]
            // (An output asked for in shared memory is written there: the reply gives its type and shape only.)
            if sharedMemoryOutputs.contains(name) || parameters["shared_memory_region"] != nil {
                tensors[name] = Tensor(datatype: datatype, shape: shape, bytes: nil, count: count)
                continue
            }
            guard let binary = parameters["binary_data_size"] as? Int else {
                throw MalformedReply("output \(name) came as JSON, not as binary data")
            }
            guard binary == bytes else {
                throw MalformedReply("output \(name) \(datatype)\(shape) needs \(bytes) bytes, its binary_data_size says \(binary)")
            }
            guard bytes <= body.count - next else {
                throw MalformedReply("output \(name) runs past the end of the body (truncated)")
            }
            tensors[name] = Tensor(datatype: datatype, shape: shape, bytes: next..<(next + bytes), count: count)
            next += bytes
        }
        guard next == body.count else { throw MalformedReply("\(body.count - next) bytes after the last output") }
        return tensors
    }

    /// What an error reply says: KServe's `{"error": "..."}`, else the start of its body.
    static func errorMessage(_ reply: HTTPReply) -> String {
        if let object = try? JSONSerialization.jsonObject(with: Data(reply.body.prefix(headerLimit))) as? [String: Any],
           let message = object["error"] as? String {
            return String(message.prefix(500))
        }
        let text = String(decoding: reply.body.prefix(200), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? "HTTP \(reply.status)" : "HTTP \(reply.status): \(text)"
    }
}

/// A reply the client cannot use.
struct MalformedReply: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
