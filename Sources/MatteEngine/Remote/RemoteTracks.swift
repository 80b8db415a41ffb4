import Foundation
import MattePixels

/// The tracks of one working size on an inference server (`StepClient`): a batch of operations is one
/// request carrying the frame (once per frame), the operations and any seeds; the reply carries each
/// slot's alpha (8-bit), its uncertainty, its state and the server's timing. On the same host the
/// frame and the matte cross through shared memory: the frame is scaled straight into the region the
/// server reads, and the server writes the alphas into one this side reads.
final class RemoteTracks: Tracks {
    let client: StepClient
    let width: Int, height: Int, slots: Int
    let gridWidth: Int, gridHeight: Int
    var alphaStride: Int { width }

    /// Where the frame and the seeds are written (request) and the alphas and uncertainties read
    /// (reply): shared memory regions when this host's server may map them, else plain memory.
    private let input: Buffer, output: Buffer
    private enum Sharing { case none, pending, registered }
    private var sharing: Sharing
    private let frameBytes: Int
    /// float32: the frame is scaled straight into `input`; uint8: through this, then rounded.
    private var scratch: [Float] = []
    private var frameSent = true

    /// Each slot's alpha in [0, 1] (the reply's 8-bit values), `width`×`height` one after the other.
    private let alphas: UnsafeMutablePointer<Float>
    private var uncertainty: [Float]
    private var tracking: [Bool]
    private var memory: [Int]
    private var timings = [Double](repeating: 0, count: 7)

    init(client: StepClient, width: Int, height: Int, slots: Int) throws {
        self.client = client
        (self.width, self.height, self.slots) = (width, height, slots)
        let padded = MatAnyone2Core.paddedSize(width: width, height: height)
        (gridWidth, gridHeight) = (padded.width / 16, padded.height / 16)
        let pixels = width * height
        frameBytes = 3 * pixels * (client.options.frameFormat == .float32 ? 4 : 1)
        let inputBytes = frameBytes + slots * pixels
        let outputBytes = slots * pixels + slots * gridWidth * gridHeight * 4
        let wantsSharing = client.options.sharedMemory == .on || (client.options.sharedMemory == .auto && client.isLocal)
        var regions: (Buffer, Buffer)?
        if wantsSharing {
            do {
                regions = (.region(try SharedMemoryRegion(role: "in", size: inputBytes)),
                           .region(try SharedMemoryRegion(role: "out", size: outputBytes)))
            } catch {
                if client.options.sharedMemory == .on {
                    throw EngineError.badSettings(detail: "server-shared-memory=on, but no region could be made here: \(error)")
                }
            }
        }
        (input, output) = regions ?? (.memory(inputBytes), .memory(outputBytes))
        sharing = regions == nil ? .none : .pending
        if client.options.frameFormat == .uint8 { scratch = [Float](repeating: 0, count: 3 * pixels) }
        alphas = .allocate(capacity: slots * pixels)
        alphas.initialize(repeating: 0, count: slots * pixels)
        uncertainty = [Float](repeating: 0, count: slots * gridWidth * gridHeight)
        tracking = [Bool](repeating: false, count: slots)
        memory = [Int](repeating: 0, count: slots)
    }

    deinit {
        if sharing == .registered {
            for case let .region(region) in [input, output] { client.unregister(region) }
        }
        for case let .memory(pointer) in [input, output] { pointer.deallocate() }
        alphas.deallocate()
    }

    /// Whether this size's frames and mattes cross through shared memory (once the server mapped it).
    var sharesMemory: Bool { sharing == .registered }

    func isTracking(_ slot: Int) -> Bool { tracking[slot] }
    func alpha(_ slot: Int) -> UnsafePointer<Float> { UnsafePointer(alphas + slot * width * height) }
    func memoryFrames(_ slot: Int) -> Int { memory[slot] }

    func meanUncertainty(_ slot: Int, over person: [Bool]) throws -> Double {
        let padded = MatAnyone2Core.paddedSize(width: width, height: height)
        let (padTop, padLeft) = ((padded.height - height) / 2, (padded.width - width) / 2)
        return uncertainty.withUnsafeBufferPointer { cells in
            MatAnyone2Core.meanUncertainty(cells.baseAddress! + slot * gridWidth * gridHeight, columns: gridWidth, rows: gridHeight,
                                           padTop: padTop, padLeft: padLeft, width: width, height: height, over: person)
        }
    }

    func load(_ frame: BGRAImage, through down: Resampler) {
        let planes = width * height
        if client.options.frameFormat == .float32 {
            down.bgraToRGB(frame, into: input.base.assumingMemoryBound(to: Float.self), pixelStep: 1, rowStride: width, planeStride: planes)
        } else {
            scratch.withUnsafeMutableBufferPointer { values in
                down.bgraToRGB(frame, into: values.baseAddress!, pixelStep: 1, rowStride: width, planeStride: planes, scale: 1)
                let bytes = input.base.assumingMemoryBound(to: UInt8.self)
                for index in 0..<values.count { bytes[index] = UInt8(min(max(values[index].rounded(), 0), 255)) }
            }
        }
        frameSent = false
    }

    func loadBlack() {
        input.base.initializeMemory(as: UInt8.self, repeating: 0, count: frameBytes)
        frameSent = false
    }

    func run(_ operations: [TrackOperation]) throws {
        // One operation per slot: a later one replaces an earlier (a stop, then a start, is a start).
        var opcodes = [Int32](repeating: 0, count: slots)
        var seeds = [Int: [Float]]()
        var warmupNow: Int?
        for operation in operations {
            switch operation {
            case let .step(slot):
                opcodes[slot] = 1
            case let .start(slot, seed, warmupPasses):
                precondition(seed.count == width * height)
                opcodes[slot] = 2
                seeds[slot] = seed
                if let warmupPasses { warmupNow = warmupPasses }
            case let .stop(slot):
                opcodes[slot] = 3
                seeds[slot] = nil
            }
        }
        let working = opcodes.contains { $0 == 1 || $0 == 2 }
        // A stream the server does not hold has nothing to stop.
        if !client.streamStarted && !working { applyStops(opcodes); return }
        let starting = seeds.keys.sorted()
        let seedBytes = input.base.assumingMemoryBound(to: UInt8.self) + frameBytes
        for (index, slot) in starting.enumerated() {
            let target = seedBytes + index * width * height
            for (offset, value) in seeds[slot]!.enumerated() { target[offset] = UInt8((value * 255).rounded()) }
        }
        do {
            let reply: StepClient.Reply
            do {
                reply = try send(opcodes, starting: starting, warmupNow: warmupNow, working: working)
            } catch is StepClient.RegionsLost {
                // The server forgot our shared memory (it restarted): registered again, once.
                sharing = .pending
                reply = try send(opcodes, starting: starting, warmupNow: warmupNow, working: working)
            }
            try read(reply, expecting: opcodes)
        } catch ServerFault.interrupted(let detail) {
            // The request may have run there: what the slots hold is no longer known (the stream starts over).
            applyStops([Int32](repeating: 3, count: slots))
            throw ServerFault.interrupted(detail)
        }
    }

    /// Builds and sends the request of `run` (the seeds already written after the frame).
    private func send(_ opcodes: [Int32], starting: [Int], warmupNow: Int?, working: Bool) throws -> StepClient.Reply {
        if sharing == .pending { try client.guarded { try registerRegions() } }
        let sendFrame = working && (!frameSent || !client.streamStarted)
        var payload = StepClient.Payload(ops: opcodes, warmupNow: warmupNow)
        let pixels = width * height
        if sendFrame {
            let float = client.options.frameFormat == .float32
            payload.frame = tensor(float ? "FRAME" : "FRAME_U8", float ? "FP32" : "UINT8", [3, height, width], in: input, at: 0, bytes: frameBytes)
        }
        if !starting.isEmpty {
            payload.seeds = tensor("SEEDS", "UINT8", [starting.count, height, width], in: input, at: frameBytes, bytes: starting.count * pixels)
        }
        if sharing == .registered, case let .region(region) = output {
            payload.alpha = .sharedMemory(region: String(region.key.dropFirst()), offset: 0, size: slots * pixels)
            payload.uncertainty = .sharedMemory(region: String(region.key.dropFirst()), offset: slots * pixels,
                                                size: slots * gridWidth * gridHeight * 4)
        }
        payload.replyLimit = (1 << 20) + (sharing == .registered ? 0 : slots * (pixels + gridWidth * gridHeight * 4))
        do {
            let reply = try client.step(payload)
            if sendFrame { frameSent = true }
            return reply
        } catch let lost as StepClient.RegionsLost where sharing == .registered {
            throw lost
        } catch is StepClient.RegionsLost {
            throw EngineError.inference(detail: "the inference server at \(client.address) does not know a shared memory region "
                                        + "it was just given")
        }
    }

    /// A request tensor: in the body (its bytes in `buffer`), or where it lies in the registered region.
    private func tensor(_ name: String, _ datatype: String, _ shape: [Int], in buffer: Buffer, at offset: Int, bytes: Int) -> KServe.Input {
        if sharing == .registered, case let .region(region) = buffer {
            return KServe.Input(name: name, datatype: datatype, shape: shape,
                                placement: .sharedMemory(region: String(region.key.dropFirst()), offset: offset, size: bytes))
        }
        return KServe.Input(name: name, datatype: datatype, shape: shape, bytes: UnsafeRawBufferPointer(start: buffer.base + offset, count: bytes))
    }

    private func registerRegions() throws {
        do {
            for case let .region(region) in [input, output] { try client.register(region) }
            sharing = .registered
        } catch let refused as SharedMemoryError {
            if client.options.sharedMemory == .on {
                throw EngineError.serverUnavailable(url: client.address, detail: "server-shared-memory=on, but \(refused) "
                                                    + "(is the server on this host, sharing its /dev/shm?)")
            }
            EngineLog.write(.info, "inference server \(client.address) cannot map this host's shared memory (\(refused)): "
                            + "frames and mattes go in the HTTP bodies")
            sharing = .none
        }
    }

    /// Takes the reply's tensors into the tracks, checking every shape and that the slots are in the
    /// state the operations leave them.
    private func read(_ reply: StepClient.Reply, expecting opcodes: [Int32]) throws {
        let pixels = width * height, cells = gridWidth * gridHeight
        func find(_ name: String, _ datatype: String, _ shape: [Int]) throws -> KServe.Tensor {
            guard let tensor = reply.tensors[name], tensor.datatype == datatype, tensor.shape == shape else {
                let got = reply.tensors[name].map { "\($0.datatype)\($0.shape)" } ?? "nothing"
                throw EngineError.inference(detail: "the inference server at \(client.address) sent a malformed reply: "
                                            + "\(name) should be \(datatype)\(shape), it is \(got)")
            }
            return tensor
        }
        let alpha = try find("ALPHA", "UINT8", [slots, height, width])
        let uncertain = try find("UNCERTAINTY", "FP32", [slots, gridHeight, gridWidth])
        let state = try find("STATE", "INT32", [slots, 2])
        let timing = try find("TIMING", "FP32", [8])
        try reply.http.body.withUnsafeBytes { body in
            func bytes(_ tensor: KServe.Tensor, shared offset: Int) -> UnsafeRawPointer {
                if let range = tensor.bytes { return body.baseAddress! + range.lowerBound }
                return UnsafeRawPointer(output.base + offset)
            }
            guard let states = state.bytes, let times = timing.bytes else {
                throw EngineError.inference(detail: "the inference server at \(client.address) put STATE or TIMING outside the reply")
            }
            var newTracking = tracking, newMemory = memory
            for slot in 0..<slots {
                let flag = body.loadUnaligned(fromByteOffset: states.lowerBound + slot * 8, as: Int32.self)
                let frames = body.loadUnaligned(fromByteOffset: states.lowerBound + slot * 8 + 4, as: Int32.self)
                newTracking[slot] = flag == 1
                newMemory[slot] = Int(frames)
                let expected = opcodes[slot] == 1 || opcodes[slot] == 2 ? true : opcodes[slot] == 3 ? false : tracking[slot]
                guard newTracking[slot] == expected, (0...Int32(client.parameters.maxMemFrames)).contains(frames) else {
                    throw EngineError.inference(detail: "the inference server at \(client.address) sent a malformed reply: person slot "
                                                + "\(slot + 1) is \(newTracking[slot] ? "tracking" : "idle") with \(frames) memory frames "
                                                + "after operation \(opcodes[slot])")
                }
            }
            let alphaBytes = bytes(alpha, shared: 0).assumingMemoryBound(to: UInt8.self)
            for index in 0..<(slots * pixels) { alphas[index] = Float(alphaBytes[index]) / 255 }
            let grid = bytes(uncertain, shared: slots * pixels)
            uncertainty.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(start: grid, count: slots * cells * 4)) }
            for index in 0..<7 {
                timings[index] += Double(body.loadUnaligned(fromByteOffset: times.lowerBound + (index + 1) * 4, as: Float.self))
            }
            (tracking, memory) = (newTracking, newMemory)
        }
    }

    private func applyStops(_ opcodes: [Int32]) {
        for (slot, opcode) in opcodes.enumerated() where opcode == 3 { tracking[slot] = false; memory[slot] = 0 }
    }

    func reset() {
        for slot in 0..<slots { tracking[slot] = false; memory[slot] = 0 }
        client.restartStream()
    }

    func clearTimings() { for index in timings.indices { timings[index] = 0 } }
    var modelMs: [Double] { Array(timings.prefix(6)) }
    var memoryMs: Double { timings[6] }
    func personMs(_ slot: Int) -> Double { 0 }
}

/// Raw memory the tracks write requests into and read replies from.
private enum Buffer {
    case region(SharedMemoryRegion)
    case memory(UnsafeMutableRawPointer)

    static func memory(_ bytes: Int) -> Buffer {
        let pointer = UnsafeMutableRawPointer.allocate(byteCount: max(bytes, 1), alignment: 64)
        pointer.initializeMemory(as: UInt8.self, repeating: 0, count: max(bytes, 1))
        return .memory(pointer)
    }

    var base: UnsafeMutableRawPointer {
        switch self {
        case let .region(region): return region.base
        case let .memory(pointer): return pointer
        }
    }
}
