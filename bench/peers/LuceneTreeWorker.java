/* Lucene 10 side of the query-tree comparison (issue 40): builds an index of the corpus as ISN's analyzer
 * saw it (bench/peers/lucene_export: tokens with "_" where ISN removed a stopword) with the fields
 * contents (title and body as two values, a position gap between them so that no phrase spans them),
 * title and body, StringFields source, section, priority and an IntPoint words; then answers query
 * trees built as Lucene users build them: a BooleanQuery of TermQuery and PhraseQuery clauses (SHOULD,
 * MUST, MUST_NOT) under BM25Similarity(1.2, 0.75), filters as FILTER (or MUST_NOT) clauses around it.
 * Lucene is reached through reflection (see LuceneWorker.java for why).
 *   java LuceneTreeWorker build CORPUS.tsv INDEX_DIR
 *   java LuceneTreeWorker lengths INDEX_DIR OUT.tsv   each document's length as its norm byte decodes
 *   java LuceneTreeWorker serve INDEX_DIR     line protocol: load NAME FILE, run NAME K (ns per query),
 *                                             top NAME K (ids), count NAME (matching documents), quit */
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

public class LuceneTreeWorker {
    static Class<?> C(String name) throws Exception { return Class.forName(name); }

    static Class<?> queryClass, occurClass, termClass;
    static Constructor<?> termCtor, termQueryCtor, boolBuilderCtor, phraseBuilderCtor;
    static Method boolAdd, boolBuild, phraseAdd, phraseBuild, rangeQuery, search, count;
    static Object searcher, storedFields;
    static Method storedDoc;
    static java.lang.reflect.Field scoreDocsField, docField;
    static Object SHOULD, MUST, MUST_NOT, FILTER;

    static Object analyzer() throws Exception {
        Path conf = Files.createTempDirectory("isn-lucene-stop");
        Files.writeString(conf.resolve("stop.txt"), "_\n");
        Object b = C("org.apache.lucene.analysis.custom.CustomAnalyzer").getMethod("builder", Path.class).invoke(null, conf);
        b = b.getClass().getMethod("withTokenizer", String.class, String[].class).invoke(b, "whitespace", new String[0]);
        b = b.getClass().getMethod("addTokenFilter", String.class, String[].class)
                .invoke(b, "stop", new String[] {"words", "stop.txt", "ignoreCase", "false"});
        b = b.getClass().getMethod("withPositionIncrementGap", int.class).invoke(b, 1000);
        return b.getClass().getMethod("build").invoke(b);
    }

    static Object bm25() throws Exception {
        return C("org.apache.lucene.search.similarities.BM25Similarity").getConstructor(float.class, float.class)
                .newInstance(1.2f, 0.75f);
    }

    static void build(String corpus, String indexDir) throws Exception {
        Object dir = C("org.apache.lucene.store.FSDirectory").getMethod("open", Path.class).invoke(null, Paths.get(indexDir));
        Class<?> analyzerClass = C("org.apache.lucene.analysis.Analyzer");
        Object iwc = C("org.apache.lucene.index.IndexWriterConfig").getConstructor(analyzerClass).newInstance(analyzer());
        iwc.getClass().getMethod("setSimilarity", C("org.apache.lucene.search.similarities.Similarity")).invoke(iwc, bm25());
        iwc.getClass().getMethod("setRAMBufferSizeMB", double.class).invoke(iwc, 512.0);
        /* documents keep the corpus order (ties are broken by doc id in both engines) */
        iwc.getClass().getMethod("setMergePolicy", C("org.apache.lucene.index.MergePolicy"))
                .invoke(iwc, C("org.apache.lucene.index.LogDocMergePolicy").getConstructor().newInstance());
        Object writer = C("org.apache.lucene.index.IndexWriter")
                .getConstructor(C("org.apache.lucene.store.Directory"), iwc.getClass()).newInstance(dir, iwc);
        Class<?> store = C("org.apache.lucene.document.Field$Store");
        Object YES = store.getField("YES").get(null), NO = store.getField("NO").get(null);
        Constructor<?> text = C("org.apache.lucene.document.TextField").getConstructor(String.class, String.class, store);
        Constructor<?> string = C("org.apache.lucene.document.StringField").getConstructor(String.class, String.class, store);
        Constructor<?> intPoint = C("org.apache.lucene.document.IntPoint").getConstructor(String.class, int[].class);
        Class<?> docClass = C("org.apache.lucene.document.Document");
        Method add = docClass.getMethod("add", C("org.apache.lucene.index.IndexableField"));
        Method addDocument = writer.getClass().getMethod("addDocument", Iterable.class);
        long t0 = System.nanoTime();
        int n = 0;
        try (BufferedReader in = Files.newBufferedReader(Paths.get(corpus), StandardCharsets.UTF_8)) {
            for (String line; (line = in.readLine()) != null;) {
                String[] f = line.split("\t", -1);
                Object doc = docClass.getConstructor().newInstance();
                add.invoke(doc, string.newInstance("id", f[0], YES));
                add.invoke(doc, text.newInstance("contents", f[1], NO));
                add.invoke(doc, text.newInstance("contents", f[2], NO));
                add.invoke(doc, text.newInstance("title", f[1], NO));
                add.invoke(doc, text.newInstance("body", f[2], NO));
                String[] names = {"source", "section", "priority"};
                for (int a = 0; a < 3; a++)
                    if (!f[3 + a].isEmpty()) add.invoke(doc, string.newInstance(names[a], f[3 + a], NO));
                int words = Integer.parseInt(f[6]);
                if (words >= 0) add.invoke(doc, intPoint.newInstance("words", new int[] {words}));
                addDocument.invoke(writer, doc);
                n++;
            }
        }
        writer.getClass().getMethod("forceMerge", int.class).invoke(writer, 1);
        writer.getClass().getMethod("close").invoke(writer);
        System.out.println("built " + n + " documents in " + (System.nanoTime() - t0) / 1e9 + " s");
    }

    /* Each document's contents length as Lucene's BM25 sees it: its one-byte norm decoded (id TAB length, in
     * doc id order), so that ISN can score with the same lengths and show what the quantisation changes. */
    static void lengths(String indexDir, String out) throws Exception {
        Object directory = C("org.apache.lucene.store.FSDirectory").getMethod("open", Path.class).invoke(null, Paths.get(indexDir));
        Object reader = C("org.apache.lucene.index.DirectoryReader").getMethod("open", C("org.apache.lucene.store.Directory")).invoke(null, directory);
        Class<?> indexReader = C("org.apache.lucene.index.IndexReader");
        List<?> leaves = (List<?>) indexReader.getMethod("leaves").invoke(reader);
        Method byte4ToInt = C("org.apache.lucene.util.SmallFloat").getMethod("byte4ToInt", byte.class);
        Object stored = indexReader.getMethod("storedFields").invoke(reader);
        Method document = stored.getClass().getMethod("document", int.class);
        document.setAccessible(true);
        StringBuilder sb = new StringBuilder();
        for (Object leaf : leaves) {
            Object leafReader = C("org.apache.lucene.index.LeafReaderContext").getMethod("reader").invoke(leaf);
            int base = C("org.apache.lucene.index.LeafReaderContext").getField("docBase").getInt(leaf);
            Object norms = C("org.apache.lucene.index.LeafReader").getMethod("getNormValues", String.class).invoke(leafReader, "contents");
            Method advanceExact = C("org.apache.lucene.index.NumericDocValues").getMethod("advanceExact", int.class);
            Method longValue = C("org.apache.lucene.index.NumericDocValues").getMethod("longValue");
            advanceExact.setAccessible(true); /* declared by a package-private superclass */
            longValue.setAccessible(true);
            int maxDoc = (Integer) C("org.apache.lucene.index.IndexReader").getMethod("maxDoc").invoke(leafReader);
            for (int d = 0; d < maxDoc; d++) {
                int length = 0;
                if (norms != null && (Boolean) advanceExact.invoke(norms, d))
                    length = (Integer) byte4ToInt.invoke(null, (byte) (long) (Long) longValue.invoke(norms));
                Object doc = document.invoke(stored, base + d);
                sb.append(doc.getClass().getMethod("get", String.class).invoke(doc, "id")).append('\t').append(length).append('\n');
            }
        }
        Files.writeString(Paths.get(out), sb.toString());
    }

    static Object term(String field, String text) throws Exception { return termCtor.newInstance(field, text); }

    /* One query line: clauses TAB filter (lucene_export's form). */
    static Object parse(String line) throws Exception {
        String[] parts = line.split("\t", -1);
        Object inner = boolBuilderCtor.newInstance();
        if (!parts[0].isEmpty())
            for (String clause : parts[0].split(";")) {
                String[] c = clause.split("\\|", 3);
                Object occur = c[0].equals("must") ? MUST : c[0].equals("must_not") ? MUST_NOT : SHOULD;
                String[] terms = c[2].split(",");
                Object q;
                if (terms.length == 1) {
                    q = termQueryCtor.newInstance(term(c[1], terms[0].substring(terms[0].indexOf(':') + 1)));
                } else {
                    Object pb = phraseBuilderCtor.newInstance();
                    for (String t : terms) {
                        int colon = t.indexOf(':');
                        phraseAdd.invoke(pb, term(c[1], t.substring(colon + 1)), Integer.parseInt(t.substring(0, colon)));
                    }
                    q = phraseBuild.invoke(pb);
                }
                boolAdd.invoke(inner, q, occur);
            }
        Object query = boolBuild.invoke(inner);
        String filter = parts.length > 1 ? parts[1].trim() : "";
        if (filter.isEmpty()) return query;
        Object outer = boolBuilderCtor.newInstance();
        boolAdd.invoke(outer, query, MUST);
        boolean negate = false;
        Object fq;
        if (filter.contains(">=")) {
            String[] kv = filter.split(">=");
            fq = rangeQuery.invoke(null, kv[0], Integer.parseInt(kv[1]), Integer.MAX_VALUE);
        } else if (filter.contains(" in {")) {
            String name = filter.substring(0, filter.indexOf(" in {"));
            String list = filter.substring(filter.indexOf('{') + 1, filter.indexOf('}'));
            Object any = boolBuilderCtor.newInstance();
            for (String v : list.split(",")) boolAdd.invoke(any, termQueryCtor.newInstance(term(name, v.trim())), SHOULD);
            fq = boolBuild.invoke(any);
        } else if (filter.contains("!=")) {
            String[] kv = filter.split("!=");
            fq = termQueryCtor.newInstance(term(kv[0], kv[1]));
            negate = true;
        } else {
            String[] kv = filter.split("=");
            fq = termQueryCtor.newInstance(term(kv[0], kv[1]));
        }
        boolAdd.invoke(outer, fq, negate ? MUST_NOT : FILTER);
        return boolBuild.invoke(outer);
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("build")) {
            build(args[1], args[2]);
            return;
        }
        if (args[0].equals("lengths")) {
            lengths(args[1], args[2]);
            return;
        }
        Object directory = C("org.apache.lucene.store.FSDirectory").getMethod("open", Path.class).invoke(null, Paths.get(args[1]));
        Object reader = C("org.apache.lucene.index.DirectoryReader").getMethod("open", C("org.apache.lucene.store.Directory")).invoke(null, directory);
        Class<?> indexReader = C("org.apache.lucene.index.IndexReader");
        Class<?> searcherClass = C("org.apache.lucene.search.IndexSearcher");
        searcher = searcherClass.getConstructor(indexReader).newInstance(reader);
        searcherClass.getMethod("setSimilarity", C("org.apache.lucene.search.similarities.Similarity")).invoke(searcher, bm25());
        queryClass = C("org.apache.lucene.search.Query");
        occurClass = C("org.apache.lucene.search.BooleanClause$Occur");
        SHOULD = occurClass.getField("SHOULD").get(null);
        MUST = occurClass.getField("MUST").get(null);
        MUST_NOT = occurClass.getField("MUST_NOT").get(null);
        FILTER = occurClass.getField("FILTER").get(null);
        termClass = C("org.apache.lucene.index.Term");
        termCtor = termClass.getConstructor(String.class, String.class);
        termQueryCtor = C("org.apache.lucene.search.TermQuery").getConstructor(termClass);
        Class<?> boolBuilder = C("org.apache.lucene.search.BooleanQuery$Builder");
        boolBuilderCtor = boolBuilder.getConstructor();
        boolAdd = boolBuilder.getMethod("add", queryClass, occurClass);
        boolBuild = boolBuilder.getMethod("build");
        Class<?> phraseBuilder = C("org.apache.lucene.search.PhraseQuery$Builder");
        phraseBuilderCtor = phraseBuilder.getConstructor();
        phraseAdd = phraseBuilder.getMethod("add", termClass, int.class);
        phraseBuild = phraseBuilder.getMethod("build");
        rangeQuery = C("org.apache.lucene.document.IntPoint").getMethod("newRangeQuery", String.class, int.class, int.class);
        search = searcherClass.getMethod("search", queryClass, int.class);
        count = searcherClass.getMethod("count", queryClass);
        scoreDocsField = C("org.apache.lucene.search.TopDocs").getField("scoreDocs");
        docField = C("org.apache.lucene.search.ScoreDoc").getField("doc");
        storedFields = indexReader.getMethod("storedFields").invoke(reader);
        storedDoc = storedFields.getClass().getMethod("document", int.class);
        storedDoc.setAccessible(true);

        Map<String, List<String>> logs = new HashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, "UTF-8");
        out.println("ready lucene-tree " + C("org.apache.lucene.util.Version").getField("LATEST").get(null));
        out.flush();
        long sink = 0;
        for (String line; (line = in.readLine()) != null;) {
            String[] w = line.split(" ", 3);
            if (w[0].equals("quit")) break;
            if (w[0].equals("load")) {
                List<String> queries = new ArrayList<>();
                for (String l : Files.readAllLines(Paths.get(w[2]), StandardCharsets.UTF_8)) {
                    int tab = l.indexOf('\t');
                    if (tab >= 0) queries.add(l.substring(tab + 1));
                }
                logs.put(w[1], queries);
                out.println("ok " + queries.size());
            } else if (w[0].equals("run") || w[0].equals("top")) {
                List<String> queries = logs.get(w[1]);
                int k = Integer.parseInt(w[2]);
                boolean top = w[0].equals("top");
                StringBuilder sb = new StringBuilder(top ? "top" : "ns");
                for (String q : queries) {
                    long t0 = System.nanoTime();
                    Object[] hits = (Object[]) scoreDocsField.get(search.invoke(searcher, parse(q), k));
                    long t1 = System.nanoTime();
                    sink += hits.length;
                    if (!top) {
                        sb.append(' ').append(t1 - t0);
                        continue;
                    }
                    sb.append('\t');
                    for (int i = 0; i < hits.length; i++) {
                        Object doc = storedDoc.invoke(storedFields, docField.getInt(hits[i]));
                        String id = (String) doc.getClass().getMethod("get", String.class).invoke(doc, "id");
                        sb.append(i == 0 ? "" : "\u001f").append(id);
                    }
                    if (hits.length == 0) sb.append('-');
                }
                out.println(sb);
            } else if (w[0].equals("count")) {
                StringBuilder sb = new StringBuilder("count");
                for (String q : logs.get(w[1])) sb.append(' ').append(count.invoke(searcher, parse(q)));
                out.println(sb);
            } else {
                out.println("error unknown command " + w[0]);
            }
            out.flush();
        }
        if (sink == 42) System.err.println("");
    }
}
