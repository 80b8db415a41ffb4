// swift-tools-version:5.9
import PackageDescription

// Layering (as in gst-plugins-rs), each target seeing only those below it:
//
//   MattePixels            image views, slicing, resampling, compositing: Foundation only (its
//                          kernels built per instruction set, picked at run time)
//   MatteEngine            engines, ONNX Runtime, motion, the inference-server client: never GStreamer
//   MatteElement           the element: GStreamer, never ONNX Runtime
//   GstMatAnyonePlugin     gst-plugin/: only exports the plugin descriptor
let package = Package(
    name: "gst-matanyone",
    products: [
        .library(name: "gstmatanyone", type: .dynamic, targets: ["GstMatAnyonePlugin"]),
    ],
    targets: [
        .systemLibrary(
            name: "CGStreamer",
            path: "Sources/CGStreamer",
            pkgConfig: "gstreamer-video-1.0",
            providers: [.apt(["libgstreamer1.0-dev", "libgstreamer-plugins-base1.0-dev"])]
        ),
        .systemLibrary(name: "COnnxRuntime", path: "Sources/COnnxRuntime"),
        .systemLibrary(
            name: "COpenBLAS",
            path: "Sources/COpenBLAS",
            pkgConfig: "openblas",
            providers: [.apt(["libopenblas-dev"])]
        ),
        // libcurl: the inference-server client's HTTP (keep-alive, TLS through the system's CA store).
        .systemLibrary(
            name: "CCurl",
            path: "Sources/CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        // The pixel kernels: one Swift source (Sources/PixelKernels) built three times, for baseline
        // x86-64 and, through the two links to it, for x86-64-v3 (AVX2) and x86-64-v4 (AVX-512) CPUs;
        // MattePixels picks the widest the CPU runs (CPixelISA asks it) and gives its users one API.
        .target(name: "MattePixelTypes", path: "Sources/MattePixelTypes", swiftSettings: [.unsafeFlags(["-O"])]),
        .target(name: "CPixelISA", path: "Sources/CPixelISA"),
        .target(name: "PixelKernels", dependencies: ["MattePixelTypes"], path: "Sources/PixelKernels",
                swiftSettings: [.unsafeFlags(["-O"])]),
        .target(name: "PixelKernelsAVX2", dependencies: ["MattePixelTypes"], path: "Sources/PixelKernelsAVX2",
                swiftSettings: [.define("PIXEL_AVX2"), .unsafeFlags(["-O", "-target-cpu", "haswell"])]),
        .target(name: "PixelKernelsAVX512", dependencies: ["MattePixelTypes"], path: "Sources/PixelKernelsAVX512",
                swiftSettings: [.define("PIXEL_AVX512"), .unsafeFlags(["-O", "-target-cpu", "skylake-avx512"])]),
        .target(
            name: "MattePixels",
            dependencies: ["MattePixelTypes", "CPixelISA", "PixelKernels", "PixelKernelsAVX2", "PixelKernelsAVX512"],
            path: "Sources/MattePixels",
            swiftSettings: [.unsafeFlags(["-O"])]
        ),
        .target(
            name: "MatteEngine",
            dependencies: ["MattePixels", "CPixelISA", "COnnxRuntime", "COpenBLAS", "CCurl"],
            path: "Sources/MatteEngine",
            swiftSettings: [.unsafeFlags(["-O"])]
        ),
        .target(
            name: "MatteElement",
            dependencies: ["CGStreamer", "MatteEngine", "MattePixels"],
            path: "Sources/MatteElement",
            swiftSettings: [.unsafeFlags(["-O"])]
        ),
        // How well MotionCarry carries a stale alpha, and what the motion costs (tools/carry.py).
        // What each build of the pixel kernels costs, round by round in one run (tools/bench_pixels.py).
        .executableTarget(name: "PixelBench", dependencies: ["MattePixels"], path: "Sources/PixelBench",
                          swiftSettings: [.unsafeFlags(["-O"])]),
        .executableTarget(name: "CarryBench", dependencies: ["MatteEngine", "MattePixels"], path: "Sources/CarryBench"),
        // Fuzz targets, one executable each over the parsers of outside bytes (Fuzz/): scripts/fuzz.sh
        // builds them with libFuzzer and AddressSanitizer; a plain build replays their corpus once.
        .target(name: "FuzzSupport", path: "Fuzz/FuzzSupport"),
        .executableTarget(name: "FuzzManifest", dependencies: ["FuzzSupport", "MatteEngine"], path: "Fuzz/Manifest"),
        .executableTarget(name: "FuzzELF", dependencies: ["FuzzSupport", "MatteEngine"], path: "Fuzz/ELF"),
        .executableTarget(name: "FuzzKServe", dependencies: ["FuzzSupport", "MatteEngine"], path: "Fuzz/KServe"),
        .executableTarget(name: "FuzzServer", dependencies: ["FuzzSupport", "MatteEngine"], path: "Fuzz/Server"),
        .executableTarget(name: "FuzzPlacement", dependencies: ["FuzzSupport", "MatteEngine"], path: "Fuzz/Placement"),
        .executableTarget(name: "FuzzURL", dependencies: ["FuzzSupport", "MatteEngine"], path: "Fuzz/URL"),
        .executableTarget(name: "FuzzMask", dependencies: ["FuzzSupport", "MatteEngine"], path: "Fuzz/Mask"),
        .target(
            name: "GstMatAnyonePlugin",
            dependencies: ["MatteElement", "CGStreamer"],
            path: "gst-plugin/Sources/GstMatAnyonePlugin"
        ),
        .systemLibrary(name: "CGstCheck", path: "Tests/CGstCheck", pkgConfig: "gstreamer-check-1.0"),
        // Where the test script puts models and frames: one place for both test targets.
        .target(name: "TestPaths", dependencies: ["MatteEngine"], path: "Tests/TestPaths"),
        // Pixel logic alone: no runtime, no GStreamer.
        .testTarget(name: "MattePixelsTests", dependencies: ["MattePixels", "PixelKernels"], path: "Tests/MattePixelsTests"),
        .testTarget(
            name: "MatteEngineTests",
            dependencies: ["MatteEngine", "MattePixels", "TestPaths"],
            path: "Tests/MatteEngineTests"
        ),
        .testTarget(
            name: "MatteElementTests",
            dependencies: ["MatteElement", "MattePixels", "PixelKernels", "CGStreamer", "CGstCheck", "TestPaths"],
            path: "Tests/MatteElementTests"
        ),
    ]
)
