import Foundation

/// Whether frames and mattes cross through shared memory when the server is on this host.
public enum SharedMemoryUse: String, CaseIterable, Sendable {
    /// When the server's address is this machine's (loopback) and it accepts the regions; else the body.
    case auto
    /// Always (an error when the server cannot map the regions).
    case on
    /// Never: everything in the HTTP bodies.
    case off
}

/// How the frame crosses the wire.
public enum ServerFrameFormat: String, CaseIterable, Sendable {
    /// The model's own input (float32 RGB planes at working size): the server computes exactly what this
    /// process would (1.77 MB a 512×288 frame).
    case float32
    /// 8-bit RGB planes: a quarter of the bytes; the model then sees the scaled frame rounded to 8 bits.
    case uint8 = "uint8"
}

/// Where and how to reach the inference server (the element's `inference-server` and its `server-*`
/// properties).
public struct ServerOptions: Equatable, Sendable {
    /// http://host:port or https://host:port, optionally with a path prefix (a proxy's).
    public var url: String
    /// The step model's name in the server's repository.
    public var model = "matanyone2"
    /// A request's limit, its wait in the server's queue included (a seed with its warm-up passes is the longest).
    public var timeoutMs = 30_000
    /// A file holding a bearer token for an authorising proxy (sent as `Authorization: Bearer`).
    public var tokenFile = ""
    /// A PEM file of CA certificates for https (empty: the system's CA store).
    public var caFile = ""
    public var sharedMemory = SharedMemoryUse.auto
    public var frameFormat = ServerFrameFormat.float32
    /// A server absent at start: false is an error (files: every frame must be matted); true carries on
    /// without a matte (`no-person-alpha`) until it answers (live chains).
    public var waitForServer = false

    public init(url: String) { self.url = url }
}

/// What the server's share of a frame cost (all its requests for that frame together).
public struct ServerTiming: Equatable, Sendable {
    /// Request out to reply in.
    public var roundTripMs = 0.0
    /// The step model's own time on the server (its reply says).
    public var computeMs = 0.0
    /// Time requests waited in the server's queue, averaged over its recent requests (its statistics); nil until known.
    public var queueMs: Double?
    public var bytesSent = 0
    public var bytesReceived = 0
    public var requests = 0
    /// Whether the frame and the matte crossed through shared memory.
    public var sharedMemory = false
    public init() {}
}

/// Something about the engine's surroundings the element tells the user once (a warning, a message).
public enum EngineNotice: Equatable, Sendable {
    /// The inference server stopped answering: frames carry no-person-alpha while the client retries.
    case serverLost(server: String, detail: String)
    /// It answers again, after `afterMs` without.
    case serverBack(server: String, afterMs: Double)
    /// It no longer holds this stream's state (it restarted, or forgot an idle stream): the tracks start over.
    case serverForgotStream(server: String, detail: String)
}

/// A request the server did not act on, which the engine handles without an error.
enum ServerFault: Error, CustomStringConvertible {
    /// No answer, and the request never reached the server (the client said so once, and retries with backoff).
    case unreachable(String)
    /// No answer to a request that may have reached the server and run there: the stream's state there
    /// is no longer known, so it starts over when the server answers.
    case interrupted(String)
    /// The server holds no state for this stream any more.
    case stateLost(String)

    var description: String {
        switch self {
        case let .unreachable(detail), let .interrupted(detail): return "the inference server does not answer: \(detail)"
        case let .stateLost(detail): return "the inference server lost the stream: \(detail)"
        }
    }
}

/// The client of the MatAnyone2 step model (tools/serve/PROTOCOL.md): one stream (a Triton sequence)
/// per element, over one keep-alive connection. The server holds the networks' state; this side holds
/// the schedule's decisions (which slot starts, steps or stops) and everything the engine keeps.
/// Used from one thread at a time (the engine's).
final class StepClient {
    static let protocolVersion = 1
    static let inputs = ["OPS", "FRAME", "FRAME_U8", "SEEDS"]
    static let outputs = ["ALPHA", "UNCERTAINTY", "STATE", "TIMING"]

    /// scheme://host:port/prefix, safe to print (no credentials).
    let address: String
    let options: ServerOptions
    let parameters: MatAnyone2Parameters
    let connection: HTTPConnection
    /// Whether the server is on this machine (shared memory may work).
    let isLocal: Bool
    /// This stream's sequence id (JSON-safe: below 2^53).
    let sequence = UInt64.random(in: 1...(1 << 52))
    /// The server acknowledged a START on this stream (else the next request starts it).
    private(set) var streamStarted = false
    private var verified = false
    private var down: (sinceMs: Double, detail: String)?
    private var retryAtMs = 0.0, backoffMs = StepClient.firstBackoffMs
    private var notices: [EngineNotice] = []
    private var timing = ServerTiming()
    private var statistics: (atMs: Double, count: Int, ns: Double)?
    private var lastSlots = 0

    static let firstBackoffMs = 250.0, longestBackoffMs = 8000.0

    init(options: ServerOptions, parameters: MatAnyone2Parameters) throws {
        self.options = options
        self.parameters = parameters
        let (base, host) = try StepClient.parse(options.url)
        address = base
        isLocal = host == "localhost" || host.hasPrefix("127.") || host == "::1" || host == "[::1]"
        guard (1...600_000).contains(options.timeoutMs) else {
            throw EngineError.badSettings(detail: "server-timeout must be 1 to 600000 ms (got \(options.timeoutMs))")
        }
        guard !options.model.isEmpty, options.model.allSatisfy({ $0.isLetter || $0.isNumber || "-_.".contains($0) }) else {
            throw EngineError.badSettings(detail: "server-model '\(options.model)' is not a model name (letters, digits, - _ .)")
        }
        var caFile: String?
        if !options.caFile.isEmpty {
            do { _ = try SafeFile.checkRegular(options.caFile, maxBytes: 16 << 20) } catch let problem as FileProblem {
                throw problem == .missing ? EngineError.fileMissing(path: options.caFile, hint: "server-ca-file names a PEM file of CA certificates")
                                          : EngineError.fileUnreadable(path: options.caFile, detail: problem.description)
            }
            caFile = options.caFile
        }
        connection = try HTTPConnection(base: base, timeoutMs: options.timeoutMs, caFile: caFile,
                                        bearer: try StepClient.token(options.tokenFile))
        do {
            try verify()
        } catch let fault as ServerFault where options.waitForServer {
            markDown(fault.detail)
        } catch let fault as ServerFault {
            let detail = fault.detail
            throw EngineError.serverUnavailable(url: address, detail: detail + ". Start the server (scripts/serve.sh on a "
                                                + "machine with the models), check inference-server, or use mode=async to carry on without it")
        }
    }

    /// The URL split into a printable base and its host; anything but http(s)://host[:port][/path] is refused.
    static func parse(_ url: String) throws -> (base: String, host: String) {
        let bad = { (why: String) in EngineError.badSettings(detail: "inference-server '\(url)' \(why): give http://HOST:PORT or https://HOST:PORT") }
        guard let parts = URLComponents(string: url), let scheme = parts.scheme?.lowercased(), ["http", "https"].contains(scheme) else {
            throw bad("is not an http or https URL")
        }
        guard let host = parts.host, !host.isEmpty else { throw bad("names no host") }
        guard parts.user == nil, parts.password == nil else {
            throw EngineError.badSettings(detail: "inference-server must not carry credentials in its URL: put a token in a file "
                                          + "and name it in server-token-file")
        }
        guard parts.query == nil, parts.fragment == nil else { throw bad("has a query or fragment") }
        // (Every trailing slash: the requests' paths start with one. Fuzz/URL found "…:844//" kept one.)
        var path = Substring(parts.percentEncodedPath)
        while path.hasSuffix("/") { path = path.dropLast() }
        let hostPart = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        return ("\(scheme)://\(hostPart)" + (parts.port.map { ":\($0)" } ?? "") + path, host)
    }

    /// The bearer token in `path` (one line of visible ASCII; never printed).
    static func token(_ path: String) throws -> String? {
        guard !path.isEmpty else { return nil }
        let bytes: [UInt8]
        do {
            bytes = try SafeFile.read(path, maxBytes: 64 << 10)
        } catch let problem as FileProblem {
            throw problem == .missing ? EngineError.fileMissing(path: path, hint: "server-token-file names a file holding the token")
                                      : EngineError.fileUnreadable(path: path, detail: problem.description)
        }
        let token = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !token.isEmpty, token.utf8.allSatisfy({ $0 > 32 && $0 < 127 }) else {
            throw EngineError.fileUnreadable(path: path, detail: "it must hold one token: visible ASCII on one line (its content is not shown)")
        }
        return token
    }

    // MARK: The server's readiness and the model's interface

    /// The server is ready and serves a step model this client speaks; faults as `ServerFault.unreachable`.
    private func verify() throws {
        let health = try send { try connection.get("/v2/health/ready", limit: 1 << 16) }
        if [401, 403].contains(health.status) { try checkStatus(health, during: "asking whether it is ready") }
        guard health.status == 200 else { throw ServerFault.unreachable("it is not ready (\(KServe.errorMessage(health)))") }
        let metadata = try send { try connection.get("/v2/models/\(options.model)", limit: 1 << 20) }
        try checkStatus(metadata, during: "reading model '\(options.model)'")
        guard StepClient.servesStepModel(metadata: metadata.body) else {
            throw EngineError.modelInvalid(path: "\(address)/v2/models/\(options.model)",
                                           detail: "it is not a MatAnyone2 step model (it lacks the inputs OPS, FRAME, FRAME_U8, SEEDS "
                                               + "or the outputs ALPHA, UNCERTAINTY, STATE, TIMING). Serve the repository "
                                               + "tools/serve/repository.py writes, or set server-model")
        }
        verified = true
    }

    /// Whether a model's KServe metadata (JSON) names the step model's inputs and outputs.
    static func servesStepModel(metadata body: [UInt8]) -> Bool {
        let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        let names = Set(((object?["inputs"] as? [[String: Any]]) ?? []).compactMap { $0["name"] as? String })
        let outputs = Set(((object?["outputs"] as? [[String: Any]]) ?? []).compactMap { $0["name"] as? String })
        return names.isSuperset(of: ["OPS", "FRAME", "FRAME_U8", "SEEDS"]) && outputs.isSuperset(of: StepClient.outputs)
    }

    /// An HTTP status the step cannot use, as the error or fault it means.
    private func checkStatus(_ reply: HTTPReply, during what: String) throws {
        if reply.status == 200 { return }
        let message = KServe.errorMessage(reply)
        // (Triton's own words for a sequence it does not know, and the step model's.)
        if message.contains("matanyone2-state-lost") || message.contains("must specify the START flag") {
            throw ServerFault.stateLost(message)
        }
        switch reply.status {
        case 401, 403:
            throw EngineError.serverRefused(url: address, detail: "\(what): \(KServe.errorMessage(reply)) "
                                            + "(check server-token-file; the token is not shown)")
        case 404:
            throw EngineError.modelMissing(path: "\(address)/v2/models/\(options.model)",
                                           hint: "The server has no model '\(options.model)' (\(KServe.errorMessage(reply))): serve "
                                               + "the repository tools/serve/repository.py writes (scripts/serve.sh), or set server-model.")
        case 429, 502, 503:
            // A proxy or server answering for a backend that is not there (or not yet).
            throw ServerFault.unreachable("\(what): \(message)")
        case 408, 504:
            // Timed out behind a proxy: the request may have run.
            throw ServerFault.interrupted("\(what): \(message)")
        case 500...599:
            throw EngineError.inference(detail: "the inference server failed on the request (\(what)): \(message)")
        default:
            throw EngineError.inference(detail: "the inference server refused the request (\(what)): \(message)")
        }
    }

    /// One HTTP exchange: transport failures become faults (the server gone) or errors (TLS, bad replies).
    private func send(_ exchange: () throws -> HTTPReply) throws -> HTTPReply {
        do {
            return try exchange()
        } catch let failure as TransportFailure {
            switch failure {
            case let .unreachable(detail, sent):
                throw sent ? ServerFault.interrupted(detail) : ServerFault.unreachable(detail)
            case .tls:
                throw EngineError.serverUnavailable(url: address, detail: "\(failure). The server's certificate must be trusted by the "
                                                    + "system's CA store, or by the PEM file named in server-ca-file")
            case .oversized:
                throw EngineError.inference(detail: "the inference server at \(address) sent \(failure)")
            }
        }
    }

    // MARK: The outage state

    private func markDown(_ detail: String) {
        let now = monotonicMs()
        if down == nil {
            down = (now, detail)
            notices.append(.serverLost(server: address, detail: detail))
            backoffMs = StepClient.firstBackoffMs
        } else {
            backoffMs = min(backoffMs * 2, StepClient.longestBackoffMs)
        }
        retryAtMs = now + backoffMs
    }

    private func markUp() {
        if let down {
            notices.append(.serverBack(server: address, afterMs: monotonicMs() - down.sinceMs))
            self.down = nil
        }
        backoffMs = StepClient.firstBackoffMs
    }

    func takeNotices() -> [EngineNotice] {
        defer { notices = [] }
        return notices
    }

    func takeTiming() -> ServerTiming? {
        defer { timing = ServerTiming() }
        return timing.requests > 0 ? timing : nil
    }

    /// The tracks of a working size on this server (a new size is a new stream start).
    func tracks(width: Int, height: Int, slots: Int) throws -> RemoteTracks {
        restartStream()
        return try RemoteTracks(client: self, width: width, height: height, slots: slots)
    }

    /// The next request starts the stream over (its state on the server is replaced).
    func restartStream() { streamStarted = false }

    // MARK: The step request

    /// A step request's tensors: where each of them is.
    struct Payload {
        var ops: [Int32]
        var frame: KServe.Input?
        var seeds: KServe.Input?
        var alpha: KServe.Placement = .body
        var uncertainty: KServe.Placement = .body
        var warmupNow: Int?
        var end = false
        /// The largest reply it can have (its outputs, and room for the header).
        var replyLimit = 1 << 20
        /// A limit of its own (nil: server-timeout).
        var timeoutMs: Int?

        var sharedMemoryOutputs: Set<String> {
            var names = Set<String>()
            if case .sharedMemory = alpha { names.insert("ALPHA") }
            if case .sharedMemory = uncertainty { names.insert("UNCERTAINTY") }
            return names
        }

        var usesSharedMemory: Bool {
            [frame?.placement, seeds?.placement, alpha, uncertainty].contains { placement in
                if case .sharedMemory? = placement { return true } else { return false }
            }
        }
    }

    /// The reply's tensors (in its body, or in the output region).
    struct Reply {
        let http: HTTPReply
        let tensors: [String: KServe.Tensor]
        let computeMs: Double
    }

    /// Sends one step request on the stream; a START when the stream has not started. Throws
    /// `RegionsLost` when the server no longer knows the shared memory regions it names.
    func step(_ payload: Payload) throws -> Reply {
        try guarded {
            if !verified { try verify() }
            return try exchange(payload)
        }
    }

    /// Runs `body` (requests to the server) unless the server is down and not due to be tried again;
    /// keeps the outage state: a fault starts or extends it, an answer ends it.
    func guarded<T>(_ body: () throws -> T) throws -> T {
        if let down, monotonicMs() < retryAtMs { throw ServerFault.unreachable(down.detail) }
        do {
            let result = try body()
            markUp()
            return result
        } catch let fault as ServerFault {
            switch fault {
            case let .unreachable(detail):
                markDown(detail)
            case let .interrupted(detail):
                markDown(detail)
                streamStarted = false
            case .stateLost:
                markUp()
                streamStarted = false
            }
            throw fault
        } catch is RegionsLost {
            markUp()
            throw RegionsLost()
        }
    }

    /// Thrown when the server says a region this client uses is not registered.
    struct RegionsLost: Error {}

    private func exchange(_ payload: Payload) throws -> Reply {
        lastSlots = payload.ops.count
        let starting = !streamStarted
        var parameters: [String: Any] = ["sequence_id": sequence, "sequence_start": starting, "sequence_end": payload.end,
                                         "protocol": StepClient.protocolVersion]
        if starting {
            parameters["mem_every"] = self.parameters.memEvery
            parameters["max_mem_frames"] = self.parameters.maxMemFrames
            parameters["top_k"] = self.parameters.topK
            parameters["stagger_updates"] = self.parameters.staggerUpdates
            parameters["warmup"] = self.parameters.warmup
        }
        if let warmup = payload.warmupNow { parameters["warmup_now"] = warmup }
        let opsBytes = payload.ops.withUnsafeBytes { Array($0) }
        return try opsBytes.withUnsafeBytes { ops in
            var inputs = [KServe.Input(name: "OPS", datatype: "INT32", shape: [payload.ops.count], bytes: ops)]
            inputs += [payload.frame, payload.seeds].compactMap { $0 }
            let outputs = [KServe.Output(name: "ALPHA", placement: payload.alpha),
                           KServe.Output(name: "UNCERTAINTY", placement: payload.uncertainty),
                           KServe.Output(name: "STATE"), KServe.Output(name: "TIMING")]
            let header = try KServe.requestHeader(parameters: parameters, inputs: inputs, outputs: outputs)
            let body = inputs.filter { if case .body = $0.placement { return true } else { return false } }.map(\.bytes)
            let start = monotonicMs()
            let http = try header.withUnsafeBytes { json in
                try send {
                    try connection.post("/v2/models/\(options.model)/infer",
                                        headers: ["Content-Type: application/octet-stream", "Inference-Header-Content-Length: \(json.count)"],
                                        parts: [json] + body, limit: payload.replyLimit, timeoutMs: payload.timeoutMs)
                }
            }
            let roundTrip = monotonicMs() - start
            timing.requests += 1
            timing.sharedMemory = timing.sharedMemory || payload.usesSharedMemory
            timing.roundTripMs += roundTrip
            timing.bytesSent += connection.lastSent
            timing.bytesReceived += connection.lastReceived
            if http.status != 200, payload.usesSharedMemory, KServe.errorMessage(http).contains("shared memory region") {
                throw RegionsLost()
            }
            try checkStatus(http, during: "the step")
            let tensors: [String: KServe.Tensor]
            do {
                tensors = try KServe.parseReply(http, sharedMemoryOutputs: payload.sharedMemoryOutputs)
            } catch let malformed as MalformedReply {
                throw EngineError.inference(detail: "the inference server at \(address) sent a malformed reply: \(malformed)")
            }
            streamStarted = !payload.end
            let computeMs = Double(float(tensors["TIMING"], in: http, at: 0) ?? 0)
            timing.computeMs += computeMs
            pollStatistics()
            return Reply(http: http, tensors: tensors, computeMs: computeMs)
        }
    }

    private func float(_ tensor: KServe.Tensor?, in reply: HTTPReply, at index: Int) -> Float? {
        guard let tensor, tensor.datatype == "FP32", let bytes = tensor.bytes, index < tensor.count else { return nil }
        return reply.body.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: bytes.lowerBound + index * 4, as: Float.self) }
    }

    /// The server's queue time, from its statistics (cumulative): at most once a second.
    private func pollStatistics() {
        let now = monotonicMs()
        if let statistics, now - statistics.atMs < 1000 { return }
        // (Its own short limit: statistics are worth less than the next frame.)
        guard let reply = try? connection.get("/v2/models/\(options.model)/stats", limit: 1 << 20, timeoutMs: 1000), reply.status == 200,
              let queue = StepClient.queueStatistics(reply.body) else { return }
        let (count, ns) = queue
        if let previous = statistics, count > previous.count, ns >= previous.ns {
            timing.queueMs = (ns - previous.ns) / Double(count - previous.count) / 1e6
        }
        statistics = (now, count, ns)
    }

    /// The cumulative queue count and time (ns) of a KServe statistics reply; nil when it has none.
    static func queueStatistics(_ body: [UInt8]) -> (count: Int, ns: Double)? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
              let models = object["model_stats"] as? [[String: Any]], let stats = models.first?["inference_stats"] as? [String: Any],
              let queue = stats["queue"] as? [String: Any], let count = queue["count"] as? Int,
              let ns = queue["ns"] as? Double ?? (queue["ns"] as? Int).map(Double.init),
              count >= 0, ns >= 0, ns.isFinite else { return nil }
        return (count, ns)
    }

    // MARK: Shared memory

    /// Registers `region` with the server under its key's name (afresh: a registration a timeout
    /// hid, or one from before a failure, is dropped first).
    func register(_ region: SharedMemoryRegion) throws {
        let name = String(region.key.dropFirst())
        _ = try send {
            try connection.post("/v2/systemsharedmemory/region/\(name)/unregister", headers: ["Content-Type: application/json"],
                                parts: [], limit: 1 << 16)
        }
        let body = try JSONSerialization.data(withJSONObject: ["key": region.key, "offset": 0, "byte_size": region.size] as [String: Any])
        let reply = try body.withUnsafeBytes { json in
            try send {
                try connection.post("/v2/systemsharedmemory/region/\(name)/register", headers: ["Content-Type: application/json"],
                                    parts: [json], limit: 1 << 16)
            }
        }
        guard reply.status == 200 else { throw SharedMemoryError("the server did not map \(region.key): \(KServe.errorMessage(reply))") }
    }

    /// Tells the server to forget `region` (best effort: the region goes anyway).
    func unregister(_ region: SharedMemoryRegion) {
        guard down == nil else { return }
        _ = try? connection.post("/v2/systemsharedmemory/region/\(region.key.dropFirst())/unregister",
                                 headers: ["Content-Type: application/json"], parts: [], limit: 1 << 16)
    }

    /// Ends the stream on the server (its state is freed at once rather than after the idle time).
    deinit {
        guard streamStarted, down == nil, lastSlots > 0 else { return }
        let stops = [Int32](repeating: 3, count: lastSlots)
        _ = try? exchange(Payload(ops: stops, end: true, timeoutMs: 1000))
    }
}

extension ServerFault {
    var detail: String {
        switch self {
        case let .unreachable(detail), let .interrupted(detail), let .stateLost(detail): return detail
        }
    }
}
