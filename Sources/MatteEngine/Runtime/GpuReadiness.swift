import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Whether a GPU execution provider of the loaded ONNX Runtime can run, decided before any session
/// is created: its provider library, every NVIDIA library that needs (found in the libraries folder
/// `scripts/setup.sh --gpu` fills from PyPI wheels, or on the system), and the NVIDIA driver (present,
/// new enough for the CUDA major the build links, with a GPU). Each problem comes with its fix, so
/// a missing piece is an error that says what to do, never an opaque provider failure or a silent
/// CPU run. `problems` is pure; `probe` looks at the machine; `prepare` also loads the libraries.
public struct GpuReadiness: Equatable, Sendable {
    public enum Driver: Equatable, Sendable {
        /// libcuda.so.1 cannot be loaded (the loader's reason).
        case missing(String)
        /// `cudaVersion` as cuDriverGetVersion gives it (13000 = CUDA 13.0); `initError` the failing
        /// cuInit's CUDA error code and name, nil when cuInit succeeded.
        case present(cudaVersion: Int, devices: Int, initError: Int32?, errorName: String?)
    }

    public var provider: ExecutionProvider
    public var providerLibrary: String
    public var providerLibraryPresent: Bool
    /// Where the NVIDIA libraries are looked for first.
    public var libraryFolders: [String]
    /// Needed libraries (by soname) found neither there nor on the system.
    public var missingLibraries: [String]
    /// The CUDA version the build needs from the driver (its libcudart major × 1000).
    public var requiredCudaVersion: Int
    public var driver: Driver

    /// What stands in the way, each with its fix; empty: the provider can run.
    public var problems: [String] {
        var problems: [String] = []
        let setup = provider == .tensorrt ? "scripts/setup.sh --gpu --tensorrt" : "scripts/setup.sh --gpu"
        if !providerLibraryPresent {
            problems.append("\(providerLibrary) is missing: the ONNX Runtime loaded is not a complete GPU build "
                            + "(run \(setup), or point runtime-library at the GPU build's libonnxruntime.so)")
        }
        if !missingLibraries.isEmpty {
            // One entry per wheel to install: "nvidia-cublas (libcublas.so.13, libcublasLt.so.13)".
            var byWheel: [(wheel: String, libraries: [String])] = []
            for library in missingLibraries {
                let wheel = GpuReadiness.wheel(for: library) ?? "?"
                if let index = byWheel.firstIndex(where: { $0.wheel == wheel }) {
                    byWheel[index].libraries.append(library)
                } else {
                    byWheel.append((wheel, [library]))
                }
            }
            let named = byWheel.map { entry in
                entry.wheel == "?" ? entry.libraries.joined(separator: ", ")
                    : "\(entry.libraries.joined(separator: ", ")) (PyPI wheel \(entry.wheel))"
            }
            problems.append("NVIDIA libraries not found in \(libraryFolders.joined(separator: ":")) nor on the system: "
                            + named.joined(separator: "; ") + " — run \(setup): it installs them there from PyPI")
        }
        let required = GpuReadiness.versionText(requiredCudaVersion)
        let minimumDriver = GpuReadiness.minimumDriver[requiredCudaVersion / 1000].map { " (\($0) or newer)" } ?? ""
        switch driver {
        case let .missing(reason):
            problems.append("no NVIDIA driver: libcuda.so.1 cannot be loaded (\(reason)); install the NVIDIA driver"
                            + "\(minimumDriver) — CUDA itself need not be installed")
        case let .present(version, devices, initError, errorName):
            if version < requiredCudaVersion {
                problems.append("the NVIDIA driver supports CUDA \(GpuReadiness.versionText(version)) but this ONNX Runtime "
                                + "build needs CUDA \(required): update the driver\(minimumDriver)")
            } else if let initError, initError == 100 {
                problems.append("no NVIDIA GPU is visible (cuInit: CUDA_ERROR_NO_DEVICE); check nvidia-smi and CUDA_VISIBLE_DEVICES")
            } else if let initError {
                problems.append("the NVIDIA driver refuses to start (cuInit: \(errorName ?? "CUDA error") \(initError)); "
                                + "check nvidia-smi, and that this user may open /dev/nvidia*")
            } else if devices == 0 {
                problems.append("no NVIDIA GPU is visible (the driver reports 0 devices); check nvidia-smi and CUDA_VISIBLE_DEVICES")
            }
        }
        return problems
    }

    /// Why GPU `index` cannot be used when the driver sees `devices` of them; nil when it can.
    static func deviceProblem(_ index: Int, of devices: Int) -> String? {
        guard index >= devices, devices > 0 else { return nil }
        let range = devices == 1 ? "only gpu-device=0" : "gpu-device=0 to \(devices - 1)"
        return "gpu-device=\(index) but the NVIDIA driver sees \(devices) GPU\(devices == 1 ? "" : "s") (\(range)); "
            + "check nvidia-smi and CUDA_VISIBLE_DEVICES, which renumbers them"
    }

    /// The PyPI wheel that carries a library (the names `scripts/setup.sh --gpu` installs).
    static func wheel(for soname: String) -> String? {
        let wheels: [(prefix: String, wheel: String)] = [
            ("libcublas", "nvidia-cublas"), ("libcudart", "nvidia-cuda-runtime"), ("libcurand", "nvidia-curand"),
            ("libcufft", "nvidia-cufft"), ("libnvrtc", "nvidia-cuda-nvrtc"), ("libcudnn", "nvidia-cudnn-cu13"),
            ("libnvinfer", "tensorrt-cu13-libs"), ("libnvonnxparser", "tensorrt-cu13-libs"),
        ]
        return wheels.first { soname.hasPrefix($0.prefix) }?.wheel
    }

    /// Linux driver branches that first support a CUDA major (NVIDIA's compatibility table).
    static let minimumDriver: [Int: String] = [11: "450", 12: "525", 13: "580"]

    static func versionText(_ version: Int) -> String { "\(version / 1000).\(version % 1000 / 10)" }

    /// Loaded by the system itself; never looked for.
    static let baseSystemLibraries: Set<String> = [
        "libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0", "libstdc++.so.6", "libgcc_s.so.1",
        "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libcuda.so.1",
    ]

    /// cuDNN is loaded by the CUDA provider at run time (it is not among its DT_NEEDED entries); ONNX
    /// Runtime's CUDA 13 builds use cuDNN 9.
    static let cudnn = "libcudnn.so.9"
}

extension GpuReadiness {
    /// Folders holding the NVIDIA libraries: `MATANYONE_CUDA_LIBS` (colon-separated) when set, else
    /// `nvidia/` beside the runtime library (where `scripts/setup.sh --gpu` puts them).
    public static func libraryFolders(runtimeLibrary: String) -> [String] {
        if let fromEnv = ProcessInfo.processInfo.environment["MATANYONE_CUDA_LIBS"], !fromEnv.isEmpty {
            return fromEnv.split(separator: ":").map(String.init)
        }
        return [(runtimeLibrary as NSString).deletingLastPathComponent + "/nvidia"]
    }

    /// Looks at the machine (loads nothing but the driver library, to ask its version).
    public static func probe(provider: ExecutionProvider, runtimeLibrary: String) -> GpuReadiness {
        probeAndPlan(provider: provider, runtimeLibrary: runtimeLibrary).readiness
    }

    /// The libraries `prepare` would load from the folders, in that order (dependencies first).
    static func loadOrder(provider: ExecutionProvider, runtimeLibrary: String) -> [String] {
        probeAndPlan(provider: provider, runtimeLibrary: runtimeLibrary).loadOrder
    }

    /// Probes and, when nothing is missing, loads every NVIDIA library the provider needs from the
    /// libraries folder, dependencies first, so that ONNX Runtime finds them already loaded (no
    /// LD_LIBRARY_PATH, no system CUDA). Done once per process and provider. Returns how many GPUs
    /// the driver sees.
    @discardableResult
    static func prepare(provider: ExecutionProvider, runtimeLibrary: String) throws -> Int {
        let key = "\(provider.rawValue) \(runtimeLibrary) \(libraryFolders(runtimeLibrary: runtimeLibrary))"
        preparedLock.lock()
        defer { preparedLock.unlock() }
        if let earlier = prepared[key] {
            if earlier.problems.isEmpty { return earlier.devices }
            throw EngineError.gpuUnavailable(provider: provider.rawValue, problems: earlier.problems)
        }
        let (readiness, loadOrder) = probeAndPlan(provider: provider, runtimeLibrary: runtimeLibrary)
        var problems = readiness.problems
        if problems.isEmpty {
            for path in loadOrder where dlopen(path, RTLD_NOW | RTLD_GLOBAL) == nil {
                let reason = dlerror().map { String(cString: $0) } ?? "unknown dlopen error"
                problems.append("cannot load \(path) (\(reason)); reinstall with scripts/setup.sh --gpu")
                break
            }
        }
        if problems.isEmpty {
            EngineLog.write(.info, "\(provider.rawValue): loaded \(loadOrder.count) NVIDIA libraries from "
                            + readiness.libraryFolders.joined(separator: ":"))
        }
        var devices = 0
        if case let .present(_, count, _, _) = readiness.driver { devices = count }
        prepared[key] = (problems, devices)
        if !problems.isEmpty { throw EngineError.gpuUnavailable(provider: provider.rawValue, problems: problems) }
        return devices
    }

    private static let preparedLock = NSLock()
    nonisolated(unsafe) private static var prepared: [String: (problems: [String], devices: Int)] = [:]

    private static func probeAndPlan(provider: ExecutionProvider, runtimeLibrary: String) -> (readiness: GpuReadiness, loadOrder: [String]) {
        let directory = (runtimeLibrary as NSString).deletingLastPathComponent
        let folders = libraryFolders(runtimeLibrary: runtimeLibrary)
        let providerFiles = (provider == .tensorrt ? ["tensorrt", "cuda"] : ["cuda"])
            .map { "\(directory)/libonnxruntime_providers_\($0).so" }
        // What the folders offer, by soname.
        var offered: [String: (path: String, needed: [String])] = [:]
        for folder in folders {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
            for name in names.sorted() where name.contains(".so") {
                let path = folder + "/" + name
                guard let info = try? SafeFile.dynamicDependencies(path) else { continue }
                let soname = info.soname ?? name
                if offered[soname] == nil { offered[soname] = (path, info.needed) }
            }
        }
        var roots: [String] = []
        var providerPresent = true
        for file in providerFiles {
            guard let info = try? SafeFile.dynamicDependencies(file) else {
                providerPresent = false
                continue
            }
            roots += info.needed
        }
        roots.append(cudnn)
        // cuDNN and NVRTC load their parts by soname at run time: load every part the folders hold.
        roots += offered.keys.sorted().filter { $0.hasPrefix("libcudnn_") || $0.hasPrefix("libnvrtc") }
        let cudartMajor = roots.compactMap { name -> Int? in
            guard name.hasPrefix("libcudart.so.") else { return nil }
            return Int(name.dropFirst("libcudart.so.".count).prefix { $0 != "." })
        }.first ?? 13
        // Depth-first over the needs: a library is loaded after everything it needs from the folders.
        var order: [String] = [], visited: Set<String> = [], missing: [String] = []
        func visit(_ soname: String) {
            guard !baseSystemLibraries.contains(soname), visited.insert(soname).inserted else { return }
            if let found = offered[soname] {
                found.needed.forEach(visit)
                order.append(found.path)
            } else if let handle = dlopen(soname, RTLD_LAZY | RTLD_LOCAL) {
                dlclose(handle)   // on the system: the loader will find it the same way
            } else {
                missing.append(soname)
            }
        }
        roots.forEach(visit)
        let readiness = GpuReadiness(provider: provider, providerLibrary: providerFiles[0],
                                     providerLibraryPresent: providerPresent, libraryFolders: folders,
                                     missingLibraries: missing, requiredCudaVersion: cudartMajor * 1000,
                                     driver: probeDriver())
        return (readiness, order)
    }

    private static func probeDriver() -> Driver {
        guard let handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) else {
            return .missing(dlerror().map { String(cString: $0) } ?? "not found")
        }
        typealias IntOut = @convention(c) (UnsafeMutablePointer<Int32>) -> Int32
        typealias Flags = @convention(c) (UInt32) -> Int32
        typealias ErrorName = @convention(c) (Int32, UnsafeMutablePointer<UnsafePointer<CChar>?>) -> Int32
        guard let versionSymbol = dlsym(handle, "cuDriverGetVersion"), let initSymbol = dlsym(handle, "cuInit"),
              let countSymbol = dlsym(handle, "cuDeviceGetCount") else {
            return .missing("libcuda.so.1 lacks the driver API (cuDriverGetVersion, cuInit, cuDeviceGetCount)")
        }
        var version: Int32 = 0
        _ = unsafeBitCast(versionSymbol, to: IntOut.self)(&version)
        let initResult = unsafeBitCast(initSymbol, to: Flags.self)(0)
        var devices: Int32 = 0
        var errorName: String?
        if initResult == 0 {
            _ = unsafeBitCast(countSymbol, to: IntOut.self)(&devices)
        } else if let nameSymbol = dlsym(handle, "cuGetErrorName") {
            var name: UnsafePointer<CChar>?
            if unsafeBitCast(nameSymbol, to: ErrorName.self)(initResult, &name) == 0, let name { errorName = String(cString: name) }
        }
        return .present(cudaVersion: Int(version), devices: Int(devices), initError: initResult == 0 ? nil : initResult,
                        errorName: errorName)
    }
}
