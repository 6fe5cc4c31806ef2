/*
 * GC pauses counted in C++ (src/proxy/metrics-gc.ts): start(bounds) registers V8 GC prologue and
 * epilogue callbacks on this environment's isolate; every pause lands in a histogram per kind
 * (scavenge, mark-compact, incremental marking, weak callbacks) with the upper bounds `bounds`
 * (seconds, ascending); read(out) copies the counts into a Float64Array. No JavaScript runs per
 * GC, so counting allocates nothing on the heap it measures (node's `gc` performance entries
 * cost some old-generation garbage each, see metrics-gc.ts). The duration is node's own
 * definition (node_perf.cc): from the prologue to the epilogue of the same GC, and a GC that
 * runs inside another one's callbacks (a scavenge during weak-callback processing) is not counted
 * on its own: the outer one is, as node guards it.
 */
#include <cstring>
#include <node.h>
#include <uv.h>
#include <v8.h>

namespace {

constexpr int kKinds = 4;
constexpr int kMaxBounds = 32;

struct Kind {
  double buckets[kMaxBounds + 1];
  double sum;
  double count;
};

struct State {
  v8::Isolate* isolate;
  bool started = false;
  /* The GC being timed, 0 for none. */
  int current = 0;
  uint64_t start_ns = 0;
  int bounds_count = 0;
  double bounds[kMaxBounds];
  Kind kinds[kKinds] = {};
};

/* The kinds in the order of metrics-gc.ts's KINDS: minor, major, incremental, weakcb. */
int KindIndex(v8::GCType type) {
  switch (type) {
    case v8::kGCTypeScavenge: return 0;
    case v8::kGCTypeMarkSweepCompact: return 1;
    case v8::kGCTypeIncrementalMarking: return 2;
    case v8::kGCTypeProcessWeakCallbacks: return 3;
    default: return -1;
  }
}

void Before(v8::Isolate*, v8::GCType type, v8::GCCallbackFlags, void* data) {
  State* s = static_cast<State*>(data);
  if (s->current != 0) return;
  s->current = static_cast<int>(type);
  s->start_ns = uv_hrtime();
}

void After(v8::Isolate*, v8::GCType type, v8::GCCallbackFlags, void* data) {
  State* s = static_cast<State*>(data);
  if (static_cast<int>(type) != s->current) return;
  s->current = 0;
  int k = KindIndex(type);
  if (k < 0) return;
  double seconds = static_cast<double>(uv_hrtime() - s->start_ns) / 1e9;
  int i = 0;
  while (i < s->bounds_count && seconds > s->bounds[i]) i++;
  Kind& kind = s->kinds[k];
  kind.buckets[i] += 1;
  kind.sum += seconds;
  kind.count += 1;
}

void Throw(v8::Isolate* isolate, const char* message) {
  isolate->ThrowException(v8::Exception::TypeError(v8::String::NewFromUtf8(isolate, message).ToLocalChecked()));
}

State* StateOf(const v8::FunctionCallbackInfo<v8::Value>& args) {
  return static_cast<State*>(args.Data().As<v8::External>()->Value());
}

/* start(bounds: Float64Array): once per environment; later calls must pass the same bounds. */
void Start(const v8::FunctionCallbackInfo<v8::Value>& args) {
  State* s = StateOf(args);
  if (args.Length() < 1 || !args[0]->IsFloat64Array()) return Throw(s->isolate, "start(bounds): bounds must be a Float64Array");
  v8::Local<v8::Float64Array> bounds = args[0].As<v8::Float64Array>();
  size_t n = bounds->Length();
  if (n > kMaxBounds) return Throw(s->isolate, "start(bounds): at most 32 bounds");
  double given[kMaxBounds];
  bounds->CopyContents(given, n * sizeof(double));
  if (s->started) {
    if (static_cast<int>(n) != s->bounds_count || std::memcmp(given, s->bounds, n * sizeof(double)) != 0) Throw(s->isolate, "start(bounds): already started with other bounds");
    return;
  }
  std::memcpy(s->bounds, given, n * sizeof(double));
  s->bounds_count = static_cast<int>(n);
  s->isolate->AddGCPrologueCallback(Before, s);
  s->isolate->AddGCEpilogueCallback(After, s);
  s->started = true;
}

/* read(out: Float64Array): per kind, the bucket counts (bounds + 1, not cumulative), the sum of seconds, the count. */
void Read(const v8::FunctionCallbackInfo<v8::Value>& args) {
  State* s = StateOf(args);
  size_t per = static_cast<size_t>(s->bounds_count) + 3;
  if (args.Length() < 1 || !args[0]->IsFloat64Array()) return Throw(s->isolate, "read(out): out must be a Float64Array");
  v8::Local<v8::Float64Array> out = args[0].As<v8::Float64Array>();
  if (out->Length() < per * kKinds) return Throw(s->isolate, "read(out): out is too short");
  v8::Local<v8::ArrayBuffer> buffer = out->Buffer();
  double* dst = reinterpret_cast<double*>(static_cast<char*>(buffer->Data()) + out->ByteOffset());
  for (int k = 0; k < kKinds; k++) {
    const Kind& kind = s->kinds[k];
    double* row = dst + k * per;
    for (int i = 0; i <= s->bounds_count; i++) row[i] = kind.buckets[i];
    row[s->bounds_count + 1] = kind.sum;
    row[s->bounds_count + 2] = kind.count;
  }
}

void Cleanup(void* data) {
  State* s = static_cast<State*>(data);
  if (s->started) {
    s->isolate->RemoveGCPrologueCallback(Before, s);
    s->isolate->RemoveGCEpilogueCallback(After, s);
  }
  delete s;
}

}  // namespace

NODE_MODULE_INIT(/* exports, module, context */) {
  // Isolate::GetCurrent(): Context::GetIsolate() is gone from the V8 of Node 26.
  v8::Isolate* isolate = v8::Isolate::GetCurrent();
  State* s = new State();
  s->isolate = isolate;
  node::AddEnvironmentCleanupHook(isolate, Cleanup, s);
  v8::Local<v8::External> data = v8::External::New(isolate, s);
  exports->Set(context, v8::String::NewFromUtf8Literal(isolate, "start"), v8::FunctionTemplate::New(isolate, Start, data)->GetFunction(context).ToLocalChecked()).Check();
  exports->Set(context, v8::String::NewFromUtf8Literal(isolate, "read"), v8::FunctionTemplate::New(isolate, Read, data)->GetFunction(context).ToLocalChecked()).Check();
}
